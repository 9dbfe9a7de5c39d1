//! The decoder ops of opset 23 that npurt computes as ONNX does, where it does:
//! `RotaryEmbedding` as npurt's Rope and `Attention` as npurt's Attention (causal and
//! grouped-query included). Each declines, saying why, where ONNX's semantics differ.

use runtime::{AttentionLayout, Op, TensorMeta};

use super::base::{Attrs, Decline, decline};
use crate::graph::NodeInfo;

/// RotaryEmbedding-23 with a 4-D X (`[B, H, S, D]`, npurt's bnsd), `position_ids` given
/// (the caches `[P, D/2]` then; without it they are per token, `[B, S, D/2]`) and the whole
/// head rotated: ONNX's formulas are npurt's Rope (rotate-half, or interleaved pairs).
/// A 3-D X (`num_heads`) and a partial `rotary_embedding_dim` are declined.
pub fn rotary(node: &NodeInfo, a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    a.only(&["interleaved", "num_heads", "rotary_embedding_dim"])?;
    let interleaved = a.flag("interleaved")?;
    let Some(x) = first.filter(|m| m.shape.rank() == 4) else {
        return decline("X is not 4-D [B, H, S, D] (a 3-D X with num_heads is not mapped)");
    };
    let d = x.shape.dims()[3] as i64;
    match a.int("rotary_embedding_dim", 0)? {
        0 => {}
        r if r == d => {}
        r => return decline(format!("rotary_embedding_dim {r} rotates part of the head dim {d}")),
    }
    if let n @ 1.. = a.int("num_heads", 0)?
        && n != x.shape.dims()[1] as i64
    {
        return decline(format!("num_heads {n} differs from X's heads {}", x.shape.dims()[1]));
    }
    if node.inputs.get(3).and_then(Option::as_ref).is_none() {
        return decline("no position_ids: per-token cos/sin caches [B, S, D/2] are not mapped");
    }
    Ok(Op::Rope { interleaved, layout: AttentionLayout::Bnsd })
}

/// Attention-23 with 4-D Q, K, V (npurt's bnsd; K and V may hold fewer heads, a divisor
/// of Q's, read as ONNX repeats them: query head `h` reads kv head `h / (H / H_kv)`), its
/// scale, and `is_causal` where ONNX's alignment is npurt's: ONNX aligns the causal mask
/// top-left when there is no past (`j <= i`), npurt bottom-right (`j <= i + T − S`), so
/// only S == T is claimed. Declined: 3-D inputs, `attn_mask` (a row it masks whole is NaN
/// in ONNX and 0 in npurt), `past_key` / `past_value`, `nonpad_kv_seqlen`, `softcap`, and
/// the outputs after Y.
pub fn attention(node: &NodeInfo, a: &Attrs<'_>, first: Option<&TensorMeta>) -> Result<Op, Decline> {
    a.only(&[
        "is_causal",
        "kv_num_heads",
        "q_num_heads",
        "scale",
        "softcap",
        "softmax_precision",
        "qk_matmul_output_mode",
    ])?;
    let Some(q) = first.filter(|m| m.shape.rank() == 4) else {
        return decline("Q is not 4-D [B, H, S, D] (3-D inputs with q_num_heads / kv_num_heads are not mapped)");
    };
    if node.inputs.iter().skip(3).any(Option::is_some) {
        return decline(
            "attn_mask, past_key / past_value or nonpad_kv_seqlen given (a fully masked row is NaN in ONNX, 0 in \
             npurt; npurt's Attention takes no past)",
        );
    }
    if node.outputs.iter().skip(1).any(Option::is_some) {
        return decline("present_key / present_value or qk_matmul_output asked for; npurt has none");
    }
    if a.float("softcap", 0.0)? != 0.0 {
        return decline("softcap");
    }
    // K's dims as ORT declares them (static here: the node is mapped with concrete dims).
    let Some(kd) = node.inputs.get(1).and_then(Option::as_ref).and_then(|k| k.dims.clone()) else {
        return decline("K has no known dims");
    };
    let kd: Vec<usize> = kd.iter().map(|&d| d.max(0) as usize).collect();
    let qd = q.shape.dims();
    for (attr, want) in [("q_num_heads", qd[1]), ("kv_num_heads", kd.get(1).copied().unwrap_or(0))] {
        if let n @ 1.. = a.int(attr, 0)?
            && n != want as i64
        {
            return decline(format!("{attr} {n} differs from the heads of the 4-D input ({want})"));
        }
    }
    let causal = a.flag("is_causal")?;
    if causal && kd.get(2) != Some(&qd[2]) {
        return decline(format!(
            "is_causal with {} queries over {} keys: ONNX aligns the mask top-left without a past, npurt \
             bottom-right (equal only when they match)",
            qd[2],
            kd.get(2).copied().unwrap_or(0)
        ));
    }
    let scale = match a.map.get("scale") {
        None => None,
        Some(_) => Some(a.float("scale", 1.0)?),
    };
    Ok(Op::Attention { scale, layout: AttentionLayout::Bnsd, causal })
}
