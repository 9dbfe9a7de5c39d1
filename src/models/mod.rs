//! Model builders: BERT-family encoders from Hugging Face configs and weights.

pub mod bert;
pub mod bert_config;
pub mod safetensors;
