//! A pool limit below the segment size: small requests come from segments the size of
//! the limit instead of failing.

use super::*;

#[test]
fn a_limit_below_the_segment_size_serves_small_requests() {
    let limit = MIB;
    let cfg = PoolConfig { limit_bytes: Some(limit), ..PoolConfig::default() };
    assert!(cfg.segment_bytes > limit, "the case needs a limit under the segment size");
    let (b, p) = pool(cfg);
    let s = default_stream(&b);
    let first = p.alloc(24, s).expect("a 24-byte request under a 1 MiB limit");
    assert_eq!(first.kind, BlockKind::Small);
    let st = p.stats();
    check_stats(&st, "first small block");
    assert_eq!((st.segments, st.total_bytes), (1, limit), "the segment is not sized to the limit: {st:?}");
    // Small requests share that segment until the limit is reached, then get a clean
    // out-of-memory error.
    let mut live = vec![first];
    loop {
        match p.alloc(100 * KIB, s) {
            Ok(blk) => live.push(blk),
            Err(Error::OutOfMemory { requested, stats, .. }) => {
                assert_eq!(requested, 100 * KIB);
                assert!(stats.total_bytes <= limit, "{stats:?}");
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(live.len() < 64, "the limit is not applied");
    }
    let st = p.stats();
    assert_eq!((st.segments, st.system_allocations), (1, 1), "{st:?}");
    assert_eq!(live.len(), 1 + 10, "1 MiB holds the 512 B block and ten 100 KiB blocks: {st:?}");
    check_live(&st, &live, "full");
    // Freed space is reused within the limit.
    let last = live.pop().unwrap();
    p.free(last, vec![]).unwrap();
    live.push(p.alloc(50 * KIB, s).expect("reuse of freed space"));
    assert_eq!(p.stats().system_allocations, 1);
    for blk in live {
        p.free(blk, vec![]).unwrap();
    }
    let st = p.stats();
    assert_eq!(st.in_use_bytes, 0);
    check_stats(&st, "all freed");
}

#[test]
fn a_limit_that_is_no_class_multiple_rounds_the_segment_down() {
    // 1000 B holds one 512 B block: the segment is 512 B, never over the limit.
    let (b, p) = pool(PoolConfig { limit_bytes: Some(1000), ..PoolConfig::default() });
    let s = default_stream(&b);
    let blk = p.alloc(24, s).unwrap();
    let st = p.stats();
    assert_eq!((st.total_bytes, blk.size), (512, 512), "{st:?}");
    assert!(matches!(p.alloc(24, s), Err(Error::OutOfMemory { .. })));
    check_stats(&p.stats(), "over the limit");
    p.free(blk, vec![]).unwrap();
    let again = p.alloc(300, s).expect("the freed block is reused");
    p.free(again, vec![]).unwrap();
    // A limit below one block could never serve anything: rejected up front.
    let e = Pool::new(host(), 0, PoolConfig { limit_bytes: Some(511), ..PoolConfig::default() }, true).unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("limit"), "{e}");
}

#[test]
fn a_one_mib_limit_through_the_runtime_runs_ops() {
    let mut cfg = RuntimeConfig::default();
    cfg.apply_overrides(|k| (k == "NPURT_POOL_LIMIT").then(|| "1M".to_string())).unwrap();
    assert_eq!(cfg.pool.limit_bytes, Some(MIB));
    let rt = runtime::Runtime::with_backend(host(), cfg).expect("a 1 MiB pool limit is valid");
    let x = rt.from_slice(&[1f32, -2., 3., -4., 5., -6.], [2, 3], 0).unwrap();
    let y = rt.run(&Op::Relu, &[&x]).expect("Relu under a 1 MiB pool limit").remove(0);
    assert_eq!(y.to_ndarray::<f32>().unwrap().as_slice().unwrap(), &[1., 0., 3., 0., 5., 0.]);
    let st = rt.pool_stats(0).unwrap();
    assert!(st.total_bytes <= MIB, "{st:?}");
    // A request over the limit is still a clean out-of-memory error.
    assert!(matches!(rt.empty(DType::F32, [MIB], 0), Err(Error::OutOfMemory { .. })));
}
