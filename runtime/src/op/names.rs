//! The op-name table: every spelling by which the fronts (the CLI's `npurt op`, the C
//! API's `npurt_execute`, Python's `execute`) name an [`OpKind`].
//!
//! Case rule: names compare ASCII case-insensitively and are taken as given (no trimming).
//! A name is an [`OpKind::name`] (npurt's own) or one of [`ALIASES`]: the ONNX operator
//! names where they differ from npurt's (`Transpose`, `LayerNormalization`, `RMSNormalization`,
//! `Identity`, `RotaryEmbedding`),
//! and the other names in use for the same op (`Embedding`, `BatchMatMul`, `SoftmaxV2`).
//! ONNX's `MatMul`, `Gemm`, `Gather`, `ReduceSum`, `ReduceMean`, `Softmax`, `Relu`,
//! `Gelu`, `Tanh`, `Erf`, `Exp`, `Sqrt`, `Neg`, `Sigmoid`, `Pow`, `Equal`, `Where`, `Concat`, `Slice`, `Expand`, `Cast`, `Reshape` and the binary arithmetic ops
//! are npurt's names already (up to case).
//!
//! Each front reports an unknown name with its own error; [`OpKind::ALL`] lists the
//! canonical names for its message.

use super::table::OpKind;

/// Names besides [`OpKind::name`], lower case, with the kind each stands for.
pub const ALIASES: [(&str, OpKind); 8] = [
    // ONNX operator names.
    ("transpose", OpKind::Permute),
    ("layernormalization", OpKind::LayerNorm),
    ("rmsnormalization", OpKind::RmsNorm),
    ("identity", OpKind::Copy),
    ("rotaryembedding", OpKind::Rope),
    // Other names in use: the embedding lookup, the batched product, Softmax's second
    // version (Ascend's operator name).
    ("embedding", OpKind::Gather),
    ("batchmatmul", OpKind::MatMul),
    ("softmaxv2", OpKind::Softmax),
];

/// The kind `name` stands for: an [`OpKind::name`] or an alias, ASCII case-insensitively.
pub fn lookup(name: &str) -> Option<OpKind> {
    ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map(|&(_, kind)| kind)
        .or_else(|| OpKind::ALL.into_iter().find(|k| k.name().eq_ignore_ascii_case(name)))
}

impl OpKind {
    /// Looks a kind up by name: [`lookup`], the op-name table.
    pub fn parse(s: &str) -> Option<OpKind> {
        lookup(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_canonical_name_resolves_in_any_case() {
        for k in OpKind::ALL {
            let name = k.name();
            for spelling in [name.to_string(), name.to_ascii_lowercase(), name.to_ascii_uppercase()] {
                assert_eq!(lookup(&spelling), Some(k), "{spelling:?}");
            }
        }
    }

    #[test]
    fn every_alias_resolves_in_any_case() {
        for (alias, k) in ALIASES {
            assert_eq!(alias, alias.to_ascii_lowercase(), "aliases are written in lower case");
            assert_eq!(lookup(alias), Some(k), "{alias:?}");
            assert_eq!(lookup(&alias.to_ascii_uppercase()), Some(k), "{alias:?}");
        }
        assert_eq!(lookup("Transpose"), Some(OpKind::Permute));
        assert_eq!(lookup("LayerNormalization"), Some(OpKind::LayerNorm));
        assert_eq!(lookup("RMSNormalization"), Some(OpKind::RmsNorm));
        assert_eq!(lookup("Identity"), Some(OpKind::Copy));
        assert_eq!(lookup("Embedding"), Some(OpKind::Gather));
        assert_eq!(lookup("BatchMatMul"), Some(OpKind::MatMul));
        assert_eq!(lookup("SoftmaxV2"), Some(OpKind::Softmax));
        assert_eq!(lookup("Relu"), Some(OpKind::Relu));
        assert_eq!(lookup("Gelu"), Some(OpKind::Gelu));
    }

    #[test]
    fn no_alias_shadows_another_kind_name() {
        for (alias, k) in ALIASES {
            for other in OpKind::ALL {
                assert!(!other.name().eq_ignore_ascii_case(alias) || other == k, "{alias:?} is {other}'s name");
            }
        }
        for (i, (a, _)) in ALIASES.iter().enumerate() {
            assert!(ALIASES[i + 1..].iter().all(|(b, _)| a != b), "{a:?} twice");
        }
    }

    #[test]
    fn unknown_names_are_rejected() {
        for name in ["", "matmul ", " MatMul", "Mat-Mul", "conv", "softmaxv3", "batch_matmul", "ReLU6", "MATMULL"] {
            assert_eq!(lookup(name), None, "{name:?}");
        }
    }

    #[test]
    fn op_kind_parse_reads_this_table() {
        for k in OpKind::ALL {
            assert_eq!(OpKind::parse(k.name()), Some(k));
        }
        for (alias, k) in ALIASES {
            assert_eq!(OpKind::parse(alias), Some(k));
        }
        assert_eq!(OpKind::parse("nope"), None);
    }
}
