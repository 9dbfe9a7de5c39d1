//! The header scanning of the aclnn ABI check (`build/headers.rs`, used by the build
//! script with feature `bindgen`): which headers it reads and which symbols count as
//! declared. The check itself (bindgen and the assertions, with its negative control)
//! runs in `scripts/acl-abi-check.sh`.

#[allow(dead_code)]
#[path = "../build/headers.rs"]
mod headers;

use headers::{MAX_DEPTH, declared_in, scan, short_name, strip_comments};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn wanted() -> HashSet<&'static str> {
    ["aclnnMatmulGetWorkspaceSize", "aclnnMatmul", "aclCreateTensor", "aclnnFinalize"].into_iter().collect()
}

#[test]
fn prototypes_count_calls_and_comments_do_not() {
    let w = wanted();
    let src = r#"
        // aclnnMatmul(void *workspace, ...);  a comment
        /* aclnnFinalize(); in a block comment */
        ACLNN_API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self,
            const aclTensor *mat2, aclTensor *out, int8_t cubeMathType,
            uint64_t *workspaceSize, aclOpExecutor **executor);
        ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t n);
        static int run() { return aclnnMatmul(ws, size, exec, stream); }
        void f() { aclnnFinalize(); t = aclCreateTensor(a, b); }
    "#;
    let mut got = declared_in(src, &w);
    got.sort();
    assert_eq!(got, ["aclCreateTensor", "aclnnMatmulGetWorkspaceSize"]);
}

#[test]
fn definitions_and_near_names_do_not_count() {
    let w = wanted();
    let src = "aclnnStatus aclnnMatmul(void *w) { return 0; }\n\
               aclnnStatus aclnnMatmulWeightNz(void *w);\n\
               aclnnStatus aclnnFinalize();\n";
    assert_eq!(declared_in(src, &w), ["aclnnFinalize"]);
}

#[test]
fn comments_are_blanked_not_joined() {
    assert_eq!(strip_comments("a/* x */b // y\nc"), "a b  \nc");
    assert_eq!(strip_comments("unterminated /* x"), "unterminated  ");
}

/// The test header set: every header is found, `aclnn_util.h` included (the build script
/// reads it never, but it must know it is there), and the scan stays below the given
/// directory.
#[test]
fn test_header_set_is_found_and_named_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/aclnn-headers");
    let dirs: Vec<PathBuf> = ["opbase", "ops-math", "ops-nn", "ops-transformer"].iter().map(|d| root.join(d)).collect();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    for d in &dirs {
        scan(d, MAX_DEPTH, &mut seen, &mut files);
    }
    let names: Vec<String> = files.iter().map(|f| short_name(f, &dirs)).collect();
    for expected in [
        "opbase/aclnn/acl_meta.h",
        "opbase/aclnn/aclnn_base.h",
        "ops-math/aclnn_add.h",
        "ops-nn/aclnn_matmul.h",
        "ops-nn/aclnn_util.h",
        "ops-transformer/aclnn_flash_attention_score.h",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} not among {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("acl_base.h")), "the runtime stand-in is not an aclnn header: {names:?}");
}
