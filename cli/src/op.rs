//! `npurt op`: one op on .npy files.

use clap::Args;
use npurt::npy::{self, NpyArray};
use npurt::{DType, Error, OpKind, Result, Runtime, RuntimeConfig, Tensor, bf16, f16};

/// `npurt op OP --input A.npy [--input B.npy ...] [--output C.npy ...] [--attr key=value ...]`
#[derive(Args)]
pub struct OpArgs {
    /// The op, by name (e.g. MatMul, Add, Softmax, LayerNorm)
    #[arg(value_name = "OP")]
    op: String,
    /// An input .npy file, in the op's operand order (repeat for each input)
    #[arg(short = 'i', long = "input", value_name = "FILE.npy", value_parser = crate::outputs::input_path)]
    inputs: Vec<String>,
    /// Where to write an output as .npy, in the op's output order (repeat for each
    /// output); without any, the outputs' dtypes and shapes are printed
    #[arg(short = 'o', long = "output", value_name = "FILE.npy", value_parser = crate::outputs::output_file)]
    outputs: Vec<String>,
    /// An attribute of the op, e.g. `axis=-1` or `eps=1e-5` (repeatable)
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attr)]
    attrs: Vec<(String, String)>,
}

fn parse_attr(kv: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = kv.split_once('=').ok_or("expected key=value")?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

fn upload(rt: &Runtime, a: &NpyArray) -> Result<Tensor> {
    let t = rt.empty(a.dtype, a.shape.clone(), 0)?;
    macro_rules! put {
        ($t:ty) => {{
            let v: Vec<$t> = bytemuck::pod_collect_to_vec(&a.data);
            let arr = npurt::ndarray::ArrayD::from_shape_vec(a.shape.clone(), v)
                .map_err(|e| Error::format_from("input", e))?;
            t.copy_from_ndarray(&arr.view())?;
        }};
    }
    match a.dtype {
        DType::F32 => put!(f32),
        DType::F16 => put!(f16),
        DType::BF16 => put!(bf16),
        DType::I32 => put!(i32),
        DType::I64 => put!(i64),
        DType::U8 => put!(u8),
    }
    Ok(t)
}

fn download(t: &Tensor) -> Result<NpyArray> {
    macro_rules! get {
        ($t:ty) => {{
            let a = t.to_ndarray::<$t>()?;
            let v: Vec<$t> = a.iter().copied().collect();
            bytemuck::cast_slice(&v).to_vec()
        }};
    }
    let data = match t.dtype() {
        DType::F32 => get!(f32),
        DType::F16 => get!(f16),
        DType::BF16 => get!(bf16),
        DType::I32 => get!(i32),
        DType::I64 => get!(i64),
        DType::U8 => get!(u8),
    };
    Ok(NpyArray { dtype: t.dtype(), shape: t.dims().to_vec(), data })
}

pub fn run(config: RuntimeConfig, args: OpArgs) -> Result<()> {
    let OpArgs { op: name, inputs, outputs, attrs } = args;
    let kind = npurt::runtime_op::names::lookup(&name).ok_or_else(|| {
        Error::Config(format!(
            "unknown op {name:?}; known: {}",
            OpKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
        ))
    })?;
    if inputs.is_empty() {
        return Err(Error::Config("op: at least one --input FILE.npy is needed".into()));
    }
    let rt = Runtime::with_config(config)?;
    let arrays: Vec<NpyArray> = inputs.iter().map(npy::read).collect::<Result<_>>()?;
    let tensors: Vec<Tensor> = arrays.iter().map(|a| upload(&rt, a)).collect::<Result<_>>()?;
    let rank = tensors[0].dims().len();
    let op = npurt::runtime_op::op_from_attrs(kind, &attrs, rank)?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let (outs, report) = rt.run_with_report(&op, &refs)?;
    eprintln!("{report}");
    if outputs.len() > outs.len() {
        return Err(Error::Config(format!(
            "{} produces {} output(s), {} --output given",
            op.name(),
            outs.len(),
            outputs.len()
        )));
    }
    for (t, path) in outs.iter().zip(&outputs) {
        npy::write(path, &download(t)?)?;
        eprintln!("wrote {path}: {} {:?}", t.dtype(), t.dims());
    }
    if outputs.is_empty() {
        for t in &outs {
            println!("{} {:?}", t.dtype(), t.dims());
        }
    }
    Ok(())
}
