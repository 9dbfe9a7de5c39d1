//! Model builders: BERT-family encoders and Llama-family decoders from Hugging Face
//! configs and weights.

pub mod bert;
pub mod bert_config;
pub mod llama;
pub mod llama_config;
pub mod llama_weights;
pub mod safetensors;
