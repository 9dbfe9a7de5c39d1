//! The caching memory pool: reuse, split/coalesce, accounting, size paths, alignment,
//! the limit and out-of-memory, cache release, and stream-aware reuse (pool level and
//! tensor level).

use npurt_test_support::rng::Rng;
use runtime::{Backend, BlockKind, DType, Error, Op, PoolConfig, ReuseStrategy, RuntimeConfig};
use runtime::{Block, Pool, PoolStats, StreamId};
use std::sync::Arc;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The runtime's minimal test backend: the pool and the tensors above it are tested
/// against nothing but the runtime.
fn host() -> Arc<dyn Backend> {
    npurt_test_support::host_backend::HostBackend::shared()
}

fn pool(cfg: PoolConfig) -> (Arc<dyn Backend>, Pool) {
    let b = host();
    let p = Pool::new(b.clone(), 0, cfg, true).expect("pool");
    (b, p)
}

fn default_stream(b: &Arc<dyn Backend>) -> StreamId {
    b.default_stream(0)
}

/// The invariants every snapshot must satisfy.
fn check_stats(s: &PoolStats, ctx: &str) {
    assert_eq!(s.total_bytes, s.in_use_bytes + s.cached_bytes, "{ctx}: total != in_use + cached: {s:?}");
    assert!(s.in_use_bytes <= s.peak_in_use_bytes, "{ctx}: in_use > peak: {s:?}");
    assert!(s.total_bytes <= s.peak_total_bytes, "{ctx}: total > peak total: {s:?}");
    assert!(s.largest_free_block <= s.cached_bytes, "{ctx}: largest free > cached: {s:?}");
    assert!((0.0..1.0).contains(&s.fragmentation), "{ctx}: fragmentation out of [0, 1): {s:?}");
    assert!(s.system_bytes <= s.in_use_bytes, "{ctx}: system bytes > in use: {s:?}");
    assert!(s.cache_hits <= s.allocations, "{ctx}: more hits than allocations: {s:?}");
    if let Some(l) = s.limit_bytes {
        assert!(s.total_bytes <= l, "{ctx}: total over the limit: {s:?}");
    }
}

/// The invariants that relate the stats to the blocks the test holds.
fn check_live(s: &PoolStats, live: &[Block], ctx: &str) {
    let in_use: usize = live.iter().map(|b| b.size).sum();
    assert_eq!(s.in_use_bytes, in_use, "{ctx}: in_use_bytes != sum of live blocks");
    let large: usize = live.iter().filter(|b| b.kind == BlockKind::Large).map(|b| b.size).sum();
    assert_eq!(s.system_bytes, large, "{ctx}: system_bytes != sum of live large blocks");
    let mut by_addr: Vec<&Block> = live.iter().collect();
    by_addr.sort_by_key(|b| b.ptr.0);
    for w in by_addr.windows(2) {
        assert!(w[0].ptr.0 + w[0].size as u64 <= w[1].ptr.0, "{ctx}: live blocks overlap: {:?} and {:?}", w[0], w[1]);
    }
}

fn overlaps(a: &Block, b: &Block) -> bool {
    a.ptr.0 < b.ptr.0 + b.size as u64 && b.ptr.0 < a.ptr.0 + a.size as u64
}

// ---- 1. reuse ----

#[test]
fn freed_block_is_reused_without_a_system_allocation() {
    let (b, p) = pool(PoolConfig::default());
    let s = default_stream(&b);
    for bytes in [1000, 64 * KIB, 3 * MIB] {
        let a = p.alloc(bytes, s).unwrap();
        let sys = p.stats().system_allocations;
        p.free(a, vec![]).unwrap();
        let again = p.alloc(bytes, s).unwrap();
        assert_eq!(again.ptr, a.ptr, "{bytes} B: the freed block was not reused");
        assert_eq!(again.size, a.size);
        let st = p.stats();
        assert_eq!(st.system_allocations, sys, "{bytes} B: reuse went to the system");
        assert!(st.cache_hits >= 1);
        p.free(again, vec![]).unwrap();
    }
}

#[test]
fn without_reuse_every_request_goes_to_the_system_and_frees_go_back() {
    for (reuse, caching) in [(false, true), (true, false), (false, false)] {
        let b = host();
        let p = Pool::new(b.clone(), 0, PoolConfig { reuse, ..PoolConfig::default() }, caching).unwrap();
        let s = default_stream(&b);
        let ctx = format!("reuse {reuse}, caching {caching}");
        let mut sys = 0;
        for bytes in [1000, 1000, 64 * KIB, 3 * MIB, 3 * MIB] {
            let a = p.alloc(bytes, s).unwrap();
            let st = p.stats();
            assert_eq!(st.system_allocations, sys + 1, "{ctx}: {bytes} B did not go to the system");
            assert!(st.total_bytes >= bytes, "{ctx}");
            sys = st.system_allocations;
            p.free(a, vec![]).unwrap();
            let st = p.stats();
            assert_eq!(st.total_bytes, 0, "{ctx}: freed bytes were kept: {st:?}");
            assert_eq!(st.cache_hits, 0, "{ctx}");
            check_stats(&st, &ctx);
        }
    }
}

// ---- 2. split and coalesce ----

#[test]
fn split_blocks_coalesce_with_both_neighbours() {
    let seg = MIB;
    let (b, p) = pool(PoolConfig { small_threshold: seg, segment_bytes: seg, ..PoolConfig::default() });
    let s = default_stream(&b);
    let blocks: Vec<Block> = (0..5).map(|_| p.alloc(4 * KIB, s).unwrap()).collect();
    let base = blocks[0].ptr.0;
    for (i, blk) in blocks.iter().enumerate() {
        assert_eq!(blk.kind, BlockKind::Small);
        assert_eq!(blk.ptr.0, base + (i * 4 * KIB) as u64, "blocks are carved in order from one segment");
    }
    let st = p.stats();
    assert_eq!((st.segments, st.system_allocations, st.total_bytes), (1, 1, seg));
    let tail = seg - 5 * 4 * KIB;
    assert_eq!(st.largest_free_block, tail);

    // Free 1 and 3: two isolated holes.
    p.free(blocks[1], vec![]).unwrap();
    p.free(blocks[3], vec![]).unwrap();
    let st = p.stats();
    assert_eq!(st.largest_free_block, tail);
    assert!(st.fragmentation > 0.0);
    check_stats(&st, "holes");
    // Free 2: joins both neighbours into one 12 KiB block, which a 12 KiB request gets.
    p.free(blocks[2], vec![]).unwrap();
    let mid = p.alloc(12 * KIB, s).unwrap();
    assert_eq!(mid.ptr, blocks[1].ptr, "blocks 1..=3 were not coalesced");
    assert_eq!(p.stats().system_allocations, 1);
    p.free(mid, vec![]).unwrap();
    // Free 0 (joins its right neighbour), then 4 (joins left and the tail on the right).
    p.free(blocks[0], vec![]).unwrap();
    p.free(blocks[4], vec![]).unwrap();
    let st = p.stats();
    check_stats(&st, "all free");
    assert_eq!(st.largest_free_block, seg, "the segment did not coalesce back: {st:?}");
    assert_eq!(st.fragmentation, 0.0);
    assert_eq!(st.in_use_bytes, 0);
    // The whole segment is served from the cache.
    let whole = p.alloc(seg, s).unwrap();
    assert_eq!(whole.ptr.0, base);
    assert_eq!(whole.size, seg);
    assert_eq!(p.stats().system_allocations, 1, "a whole-segment request went to the system");
}

// ---- 3. stats consistency ----

#[test]
fn stats_stay_consistent_through_a_random_sequence() {
    for strategy in [ReuseStrategy::BestFit, ReuseStrategy::FirstFit] {
        for limit in [None, Some(64 * MIB)] {
            let cfg = PoolConfig { strategy, limit_bytes: limit, ..PoolConfig::default() };
            let (b, p) = pool(cfg);
            let s = default_stream(&b);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let mut live: Vec<Block> = Vec::new();
            for step in 0..3000 {
                let ctx = format!("{strategy:?} limit {limit:?} step {step}");
                match rng.below(10) {
                    0..=4 => {
                        let bytes = match rng.below(4) {
                            0 => 1 + rng.below(2 * KIB),
                            1 => 1 + rng.below(MIB),
                            2 => MIB + 1 + rng.below(3 * MIB),
                            _ => 1 + rng.below(64 * KIB),
                        };
                        match p.alloc(bytes, s) {
                            Ok(blk) => {
                                assert!(blk.size >= bytes, "{ctx}: block smaller than the request");
                                live.push(blk);
                            }
                            Err(Error::OutOfMemory { requested, stats, .. }) => {
                                assert!(limit.is_some(), "{ctx}: OOM without a limit");
                                assert_eq!(requested, bytes);
                                check_stats(&stats, &ctx);
                            }
                            Err(e) => panic!("{ctx}: {e}"),
                        }
                    }
                    5..=8 => {
                        if !live.is_empty() {
                            let i = rng.below(live.len());
                            p.free(live.swap_remove(i), vec![]).unwrap();
                        }
                    }
                    _ => {
                        let before = p.stats();
                        let released = if rng.below(2) == 0 { p.release_cached() } else { p.trim() };
                        let after = p.stats();
                        assert_eq!(before.total_bytes - released, after.total_bytes, "{ctx}: released bytes");
                    }
                }
                let st = p.stats();
                check_stats(&st, &ctx);
                check_live(&st, &live, &ctx);
            }
            for blk in live.drain(..) {
                p.free(blk, vec![]).unwrap();
            }
            let st = p.stats();
            check_stats(&st, "end");
            assert_eq!(st.in_use_bytes, 0);
            p.release_cached();
            assert_eq!(p.stats().total_bytes, 0, "{strategy:?}: everything should go back");
        }
    }
}

#[test]
fn double_and_unknown_frees_are_errors() {
    let (b, p) = pool(PoolConfig::default());
    let s = default_stream(&b);
    let a = p.alloc(100, s).unwrap();
    p.free(a, vec![]).unwrap();
    assert!(p.free(a, vec![]).unwrap_err().to_string().contains("double free"));
    let bogus = Block { ptr: runtime::DevicePtr(a.ptr.0 + 8), size: 512, kind: BlockKind::Small };
    assert!(p.free(bogus, vec![]).unwrap_err().to_string().contains("unknown block"));
    check_stats(&p.stats(), "after bad frees");
}

// ---- 4. no growth ----

#[test]
fn no_growth_over_ten_thousand_cycles() {
    // A workload's tensor sizes, small and large; up to 32 blocks live, at most 4 of a
    // size, so the high-water mark of the live set is reached during the warm-up.
    let menu = [256, 1000, 4 * KIB, 12 * KIB + 7, 100 * KIB, 300 * KIB, 1000 * KIB, 1300 * KIB, 3 * MIB, 5 * MIB + 17];
    for strategy in [ReuseStrategy::BestFit, ReuseStrategy::FirstFit] {
        for seed in [0x1234_5678_9abc_def1u64, 7, 3039] {
            let cfg = PoolConfig { strategy, ..PoolConfig::default() };
            let seg = cfg.segment_bytes;
            let (b, p) = pool(cfg);
            let s = default_stream(&b);
            let mut rng = Rng(seed);
            let mut live: Vec<Block> = Vec::new();
            let mut warm = None;
            for cycle in 1..=10_000 {
                while live.len() < 32 && (live.len() < 8 || rng.below(4) != 0) {
                    let bytes = menu[rng.below(menu.len())];
                    let class = p.size_class(bytes).0;
                    if live.iter().filter(|b| b.size == class).count() < 4 {
                        live.push(p.alloc(bytes, s).unwrap());
                    }
                }
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(live.len());
                    p.free(live.swap_remove(i), vec![]).unwrap();
                }
                if cycle == 2_000 {
                    warm = Some(p.stats());
                }
            }
            let warm = warm.unwrap();
            let end = p.stats();
            let ctx = format!("{strategy:?} seed {seed:#x}: {warm:?} -> {end:?}");
            check_stats(&end, &ctx);
            // Bounded by the warm-up peak: at most one more segment, when the live set's
            // high-water mark rises a little after the warm-up.
            assert!(end.system_allocations <= warm.system_allocations + 1, "allocations kept growing: {ctx}");
            assert!(end.peak_total_bytes <= warm.peak_total_bytes + seg, "held memory kept growing: {ctx}");
            // And what is held stays close to what is used.
            assert!(
                end.peak_total_bytes as f64 <= 1.5 * end.peak_in_use_bytes as f64,
                "the pool holds far more than it ever handed out: {ctx}"
            );
        }
    }
}

// ---- 5. small vs large ----

#[test]
fn small_requests_come_from_segments_and_large_ones_from_the_system() {
    let cfg = PoolConfig::default();
    let (threshold, seg) = (cfg.small_threshold, cfg.segment_bytes);
    let (b, p) = pool(cfg);
    let s = default_stream(&b);
    let small = p.alloc(1000, s).unwrap();
    assert_eq!(small.kind, BlockKind::Small);
    assert_eq!(p.size_class(1000), (small.size, BlockKind::Small));
    let st = p.stats();
    assert_eq!((st.segments, st.total_bytes, st.system_bytes), (1, seg, 0), "{st:?}");
    let at_threshold = p.alloc(threshold, s).unwrap();
    assert_eq!(at_threshold.kind, BlockKind::Small);
    let st = p.stats();
    assert_eq!(
        (st.segments, st.total_bytes, st.system_bytes),
        (1, seg, 0),
        "a threshold-sized request left the segment: {st:?}"
    );
    let large = p.alloc(threshold + 1, s).unwrap();
    assert_eq!(large.kind, BlockKind::Large);
    assert!(large.size > threshold);
    let st = p.stats();
    assert_eq!(st.segments, 2);
    assert_eq!(st.total_bytes, seg + large.size);
    assert_eq!(st.system_bytes, large.size, "large bytes are not counted as from the system");
    check_live(&st, &[small, at_threshold, large], "mixed");
    p.free(large, vec![]).unwrap();
    assert_eq!(p.stats().system_bytes, 0);
}

#[test]
fn a_threshold_that_is_no_class_multiple_does_not_overflow_a_segment() {
    // 1040 B is a multiple of the alignment but not of the 512 B small class, so a
    // threshold-sized request has a class (1536 B) bigger than the segment (1088 B).
    let cfg = PoolConfig { small_threshold: 1040, segment_bytes: 1088, ..PoolConfig::default() };
    let (b, p) = pool(cfg);
    let s = default_stream(&b);
    let blk = p.alloc(1040, s).unwrap();
    assert!(blk.size >= 1040);
    let st = p.stats();
    check_stats(&st, "odd threshold");
    assert!(st.total_bytes >= blk.size, "a block bigger than its segment: {blk:?}, {st:?}");
    // The memory really is there: the backend accepts a fill of the whole block.
    b.memset(0, blk.ptr, 0xab, blk.size, s).unwrap();
    p.free(blk, vec![]).unwrap();
}

#[test]
fn a_request_too_big_for_the_address_space_is_an_error_not_a_panic() {
    let (b, p) = pool(PoolConfig::default());
    let s = default_stream(&b);
    for bytes in [usize::MAX, usize::MAX - MIB, 1 << 62] {
        match p.alloc(bytes, s) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, bytes),
            other => panic!("{bytes} B: expected out-of-memory, got {other:?}"),
        }
    }
    check_stats(&p.stats(), "after huge requests");
    // And through the runtime.
    let rt = runtime::Runtime::with_backend(b.clone(), RuntimeConfig::default()).expect("runtime");
    assert!(rt.empty(DType::U8, [usize::MAX], 0).is_err());
}

// ---- 6. alignment ----

#[test]
fn every_block_honours_the_configured_alignment() {
    for align in [16usize, 64, 256, 4096] {
        let (b, p) = pool(PoolConfig { alignment: align, ..PoolConfig::default() });
        let s = default_stream(&b);
        let mut live = Vec::new();
        for bytes in [1, 17, 100, 511, 513, 4097, 65_537, MIB - 3, MIB, MIB + 1, 3 * MIB + 5] {
            let blk = p.alloc(bytes, s).unwrap();
            assert_eq!(blk.ptr.0 % align as u64, 0, "align {align}: {bytes} B at {:#x}", blk.ptr.0);
            assert_eq!(blk.size % align, 0, "align {align}: size {} of {bytes} B", blk.size);
            live.push(blk);
        }
        // Blocks carved after frees and coalescing are aligned too.
        for blk in live.drain(..).step_by(2) {
            p.free(blk, vec![]).unwrap();
        }
        for bytes in [33, 700, 9000] {
            let blk = p.alloc(bytes, s).unwrap();
            assert_eq!(blk.ptr.0 % align as u64, 0, "align {align} after reuse: {bytes} B");
        }
        // Tensors of a runtime configured the same way.
        let mut cfg = RuntimeConfig::default();
        cfg.pool.alignment = align;
        let rt = runtime::Runtime::with_backend(b.clone(), cfg).unwrap();
        for n in [1usize, 3, 77, 1000] {
            let t = rt.from_slice(&vec![1f32; n], [n], 0).unwrap();
            assert_eq!(t.data_ptr() % align as u64, 0, "align {align}: tensor of {n} f32");
        }
    }
}

#[test]
fn alignment_that_is_not_a_power_of_two_is_rejected() {
    for bad in [48usize, 8, 0, 100] {
        let mut cfg = RuntimeConfig::default();
        cfg.pool.alignment = bad;
        let e = cfg.validate().unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{bad}: {e:?}");
        assert!(e.to_string().contains("power of two"), "{bad}: {e}");
        let e = runtime::Runtime::with_backend(host(), cfg.clone()).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{bad}: {e}");
        let e = Pool::new(host(), 0, cfg.pool.clone(), true).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{bad}: {e}");
    }
}

// ---- 7. limit and out-of-memory ----

#[test]
fn the_limit_gives_out_of_memory_with_stats() {
    let limit = 8 * MIB;
    let (b, p) = pool(PoolConfig { limit_bytes: Some(limit), ..PoolConfig::default() });
    let s = default_stream(&b);
    let a = p.alloc(3 * MIB, s).unwrap();
    let c = p.alloc(3 * MIB, s).unwrap();
    match p.alloc(3 * MIB, s) {
        Err(Error::OutOfMemory { device, requested, stats, source }) => {
            assert_eq!(requested, 3 * MIB);
            assert!(device.contains("host"), "{device}");
            assert_eq!(stats.limit_bytes, Some(limit));
            assert!(stats.total_bytes <= limit, "{stats:?}");
            assert_eq!(stats.total_bytes, 6 * MIB);
            assert_eq!(stats.in_use_bytes, 6 * MIB);
            check_stats(&stats, "oom");
            let msg = Error::OutOfMemory { device, requested, stats, source }.to_string();
            assert!(msg.contains("requested 3145728 bytes") && msg.contains("limit 8388608"), "{msg}");
        }
        other => panic!("expected out-of-memory, got {other:?}"),
    }
    // Free one: 3 MiB cached. A 4 MiB request fits only once the cache is released.
    p.free(a, vec![]).unwrap();
    let st = p.stats();
    assert_eq!((st.total_bytes, st.cached_bytes), (6 * MIB, 3 * MIB));
    let sys = st.system_allocations;
    let d = p.alloc(4 * MIB, s).expect("the pool should release its cache and retry");
    let st = p.stats();
    assert_eq!(st.system_allocations, sys + 1);
    assert_eq!(st.total_bytes, 7 * MIB, "the cached 3 MiB should have been released: {st:?}");
    assert_eq!(st.cached_bytes, 0);
    check_live(&st, &[c, d], "after retry");
    // Still over the limit with everything in use: out-of-memory again, nothing leaked.
    assert!(matches!(p.alloc(2 * MIB, s), Err(Error::OutOfMemory { .. })));
    check_stats(&p.stats(), "second oom");
    // Small requests are bounded by the limit too (2 MiB segments).
    p.free(d, vec![]).unwrap();
    let mut small = Vec::new();
    loop {
        match p.alloc(512 * KIB, s) {
            Ok(blk) => small.push(blk),
            Err(Error::OutOfMemory { stats, .. }) => {
                assert!(stats.total_bytes <= limit);
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(small.len() < 64, "the limit is not applied to small requests");
    }
    assert_eq!(small.len(), 8, "8 MiB limit - 3 MiB in use leaves two 2 MiB segments of 4 x 512 KiB");
}

#[test]
fn the_limit_through_the_runtime() {
    let mut cfg = RuntimeConfig::default();
    cfg.pool.limit_bytes = Some(8 * MIB);
    let rt = runtime::Runtime::with_backend(host(), cfg).unwrap();
    let a = rt.empty(DType::F32, [MIB / 4 * 3], 0).unwrap(); // 3 MiB
    let e = rt.empty(DType::F32, [MIB / 4 * 6], 0).unwrap_err(); // 6 MiB more
    match e {
        Error::OutOfMemory { requested, stats, .. } => {
            assert_eq!(requested, 6 * MIB);
            assert!(stats.total_bytes <= 8 * MIB);
        }
        e => panic!("{e:?}"),
    }
    drop(a);
    // 3 MiB cached; 6 MiB fits only after releasing it.
    let b = rt.empty(DType::F32, [MIB / 4 * 6], 0).expect("retry after releasing the cache");
    assert_eq!(rt.pool_stats(0).unwrap().total_bytes, 6 * MIB);
    drop(b);
}

// ---- 8. release_cached ----

#[test]
fn release_cached_returns_the_bytes_it_released() {
    let (b, p) = pool(PoolConfig::default());
    let s = default_stream(&b);
    assert_eq!(p.release_cached(), 0);
    let small: Vec<Block> = (0..6).map(|_| p.alloc(700 * KIB, s).unwrap()).collect(); // 2 per segment
    let large: Vec<Block> = (0..3).map(|i| p.alloc(2 * MIB + i * MIB, s).unwrap()).collect();
    let keep = [small[0], large[0]];
    for blk in small[1..].iter().chain(&large[1..]) {
        p.free(*blk, vec![]).unwrap();
    }
    let before = p.stats();
    let released = p.release_cached();
    let after = p.stats();
    check_stats(&after, "after release");
    assert_eq!(released, before.total_bytes - after.total_bytes);
    // Two whole small segments and two large blocks go; the first segment stays (in use).
    assert_eq!(released, 2 * 2 * MIB + 3 * MIB + 4 * MIB, "{before:?} -> {after:?}");
    assert_eq!(after.total_bytes, 2 * MIB + large[0].size);
    assert_eq!(after.segments, 2);
    check_live(&after, &keep, "kept");
    assert_eq!(p.release_cached(), 0, "a second release has nothing to do");
    for blk in keep {
        p.free(blk, vec![]).unwrap();
    }
    let r = p.release_cached();
    assert_eq!(r, 2 * MIB + large[0].size);
    let st = p.stats();
    assert_eq!(st.total_bytes, st.in_use_bytes);
    assert_eq!(st.total_bytes, 0);
}

#[test]
fn release_cached_through_the_runtime() {
    let rt = runtime::Runtime::with_backend(host(), RuntimeConfig::default()).unwrap();
    // A large tensor (a segment of its own) stays alive; everything else goes back.
    let keep = rt.zeros(DType::F32, [512 * 1024], 0).unwrap();
    for n in [10usize, 1000, 300_000, 1_000_000] {
        drop(rt.zeros(DType::F32, [n], 0).unwrap());
    }
    let before = rt.pool_stats(0).unwrap();
    assert!(before.cached_bytes > 0);
    let r = rt.release_cached(0).unwrap();
    let after = rt.pool_stats(0).unwrap();
    assert_eq!(r, before.total_bytes - after.total_bytes);
    assert!(r > 0);
    assert_eq!(after.total_bytes, after.in_use_bytes, "{after:?}");
    assert_eq!(keep.to_ndarray::<f32>().unwrap().sum(), 0.0);
}

// ---- 9. stream-aware reuse (pool level) ----

/// A pool whose segments hold exactly two 4 KiB blocks, so that once both are handed out
/// no free block can serve the next 4 KiB request and the same-stream path is taken.
fn tight_pool(b: &Arc<dyn Backend>) -> Pool {
    let cfg = PoolConfig { small_threshold: 8 * KIB, segment_bytes: 8 * KIB, ..PoolConfig::default() };
    Pool::new(b.clone(), 0, cfg, true).unwrap()
}

#[test]
fn a_block_pending_on_a_stream_is_reused_only_when_safe() {
    let g = gate::Gate::new(host());
    let b: Arc<dyn Backend> = g.clone();
    let p = tight_pool(&b);
    let a = b.create_stream(0).unwrap();
    let other = b.create_stream(0).unwrap();
    let def = b.default_stream(0);
    let x = p.alloc(4 * KIB, a).unwrap();
    let _neighbour = p.alloc(4 * KIB, a).unwrap(); // fills the segment

    // Work on `a` still uses x: it and the release event are queued while `a` is blocked.
    g.block(0, a);
    b.memset(0, x.ptr, 7, x.size, a).unwrap();
    let ev = b.create_event(0).unwrap();
    b.record_event(0, ev, a).unwrap();
    assert!(!b.query_event(0, ev).unwrap());
    p.free(x, vec![(a, ev)]).unwrap();
    let st = p.stats();
    assert_eq!(st.pending_blocks, 1);
    assert_eq!(st.in_use_bytes, 4 * KIB);
    assert_eq!(st.cached_bytes, 4 * KIB);
    assert_eq!(st.largest_free_block, 0, "a pending block counts as free: {st:?}");
    check_stats(&st, "pending");

    // The same stream may get it at once: its order puts the new work after the old.
    let w = p.alloc(4 * KIB, a).unwrap();
    assert_eq!(w.ptr, x.ptr, "same-stream reuse of the pending block");
    assert_eq!(p.stats().system_allocations, 1);
    assert_eq!(p.stats().pending_blocks, 0);

    // Freed again (new work queued, still blocked): other streams must not get it.
    b.memset(0, w.ptr, 8, w.size, a).unwrap();
    let ev2 = b.create_event(0).unwrap();
    b.record_event(0, ev2, a).unwrap();
    p.free(w, vec![(a, ev2)]).unwrap();
    let y = p.alloc(4 * KIB, other).unwrap();
    let z = p.alloc(4 * KIB, def).unwrap();
    for blk in [&y, &z] {
        assert!(!overlaps(blk, &x), "another stream got memory the blocked stream still uses: {blk:?} vs {x:?}");
    }
    assert_eq!(p.stats().system_allocations, 2, "the other streams should have been served from a new segment");
    p.free(y, vec![]).unwrap();
    p.free(z, vec![]).unwrap();
    // Nothing to reuse yet: another stream still gets fresh memory (or the free segment).
    let q = p.alloc(8 * KIB, other).unwrap();
    assert!(!overlaps(&q, &x));
    assert_eq!(p.stats().pending_blocks, 1);

    // Once the stream has passed the event, any stream gets the block.
    g.open().unwrap();
    b.synchronize_stream(0, a).unwrap();
    assert!(b.query_event(0, ev2).unwrap());
    let r = p.alloc(4 * KIB, other).unwrap();
    assert_eq!(r.ptr, x.ptr, "after synchronising, another stream gets the block");
    assert_eq!(p.stats().pending_blocks, 0);
    check_stats(&p.stats(), "end");
}

#[test]
fn same_stream_reuse_does_not_free_the_rest_of_a_pending_block() {
    let g = gate::Gate::new(host());
    let b: Arc<dyn Backend> = g.clone();
    let cfg = PoolConfig { small_threshold: 128 * KIB, segment_bytes: 128 * KIB, ..PoolConfig::default() };
    let p = Pool::new(b.clone(), 0, cfg, true).unwrap();
    let a = b.create_stream(0).unwrap();
    let other = b.create_stream(0).unwrap();
    let x = p.alloc(64 * KIB, a).unwrap();
    let _neighbour = p.alloc(64 * KIB, a).unwrap(); // fills the segment
    g.block(0, a);
    b.memset(0, x.ptr, 1, x.size, a).unwrap();
    let ev = b.create_event(0).unwrap();
    b.record_event(0, ev, a).unwrap();
    p.free(x, vec![(a, ev)]).unwrap();
    // A smaller request on the same stream: whatever it gets, no part of x may become
    // free for another stream while `a` has not passed the event.
    let w = p.alloc(4 * KIB, a).unwrap();
    let mut others = Vec::new();
    for _ in 0..40 {
        let blk = p.alloc(4 * KIB, other).unwrap();
        assert!(!overlaps(&blk, &x), "another stream got part of a pending block: {blk:?} inside {x:?}");
        others.push(blk);
    }
    let st = p.stats();
    check_stats(&st, "after the smaller same-stream request");
    g.open().unwrap();
    b.synchronize_stream(0, a).unwrap();
    p.free(w, vec![]).unwrap();
    for blk in others {
        p.free(blk, vec![]).unwrap();
    }
    let st = p.stats();
    assert_eq!(st.pending_blocks, 0, "{st:?}");
    assert_eq!(st.in_use_bytes, 64 * KIB);
}

#[test]
fn a_same_stream_owner_that_never_uses_the_block_does_not_release_it_early() {
    let g = gate::Gate::new(host());
    let b: Arc<dyn Backend> = g.clone();
    let p = tight_pool(&b);
    let a = b.create_stream(0).unwrap();
    let other = b.create_stream(0).unwrap();
    let x = p.alloc(4 * KIB, a).unwrap();
    let _neighbour = p.alloc(4 * KIB, a).unwrap();
    g.block(0, a);
    b.memset(0, x.ptr, 1, x.size, a).unwrap();
    let ev = b.create_event(0).unwrap();
    b.record_event(0, ev, a).unwrap();
    p.free(x, vec![(a, ev)]).unwrap();
    let w = p.alloc(4 * KIB, a).unwrap();
    assert_eq!(w.ptr, x.ptr);
    // The new owner queues nothing and frees it with no events: the old work still runs.
    p.free(w, vec![]).unwrap();
    assert_eq!(p.stats().pending_blocks, 1, "the old owner's event was forgotten");
    let y = p.alloc(4 * KIB, other).unwrap();
    assert!(!overlaps(&y, &x), "another stream got a block whose old work is still queued");
    g.open().unwrap();
    b.synchronize_stream(0, a).unwrap();
    let r = p.alloc(4 * KIB, other).unwrap();
    assert_eq!(r.ptr, x.ptr);
    assert_eq!(p.stats().pending_blocks, 0);
}

// ---- 10. stream-aware reuse (tensor level) ----

fn gated_runtime(tight: bool) -> (Arc<gate::Gate>, runtime::Runtime) {
    let g = gate::Gate::new(host());
    let b: Arc<dyn Backend> = g.clone();
    let mut cfg = RuntimeConfig::default();
    if tight {
        // Two 4 KiB tensors per segment (see `tight_pool`).
        cfg.pool.small_threshold = 8 * KIB;
        cfg.pool.segment_bytes = 8 * KIB;
    }
    let rt = runtime::Runtime::with_backend(b, cfg).unwrap();
    (g, rt)
}

#[test]
fn dropping_a_tensor_with_queued_work_keeps_its_block_from_other_streams() {
    let (g, rt) = gated_runtime(false);
    let s = rt.stream(0).unwrap();
    let n = 1024;
    let data: Vec<f32> = (0..n).map(|i| i as f32 - 500.0).collect();
    let x = rt.from_slice(&data, [n], 0).unwrap();
    let y = rt.empty(DType::F32, [n], 0).unwrap();
    let yptr = y.data_ptr();
    g.block(0, s.id());
    let r = rt.execute_on(&s, &Op::Relu, &[&x], &[&y]).unwrap();
    assert!(r.elapsed.is_none());
    drop(y);
    let st = rt.pool_stats(0).unwrap();
    assert_eq!(st.pending_blocks, 1, "{st:?}");
    // The default stream must not get y's block while the Relu is queued.
    let z = rt.empty(DType::F32, [n], 0).unwrap();
    assert_ne!(z.data_ptr(), yptr);
    // Nor another user stream.
    let s2 = rt.stream(0).unwrap();
    let z2 = {
        let _scope = rt.stream_scope(&s2);
        rt.empty(DType::F32, [n], 0).unwrap()
    };
    assert_ne!(z2.data_ptr(), yptr);
    g.open().unwrap();
    s.synchronize().unwrap();
    assert_eq!(rt.pool_stats(0).unwrap().pending_blocks, 0);
    let w = rt.empty(DType::F32, [n], 0).unwrap();
    assert_eq!(w.data_ptr(), yptr, "after the work finished the block comes back");
    drop((z, z2, w, x));
}

#[test]
fn a_tensor_reused_on_the_same_stream_and_dropped_unused_does_not_free_early() {
    let (g, rt) = gated_runtime(true);
    let s = rt.stream(0).unwrap();
    let n = 1024; // 4 KiB
    let x = rt.from_slice(&vec![1f32; n], [n], 0).unwrap();
    let y = rt.empty(DType::F32, [n], 0).unwrap(); // fills x's segment
    let yptr = y.data_ptr();
    g.block(0, s.id());
    rt.execute_on(&s, &Op::Relu, &[&x], &[&y]).unwrap();
    drop(y);
    {
        let _scope = rt.stream_scope(&s);
        let w = rt.empty(DType::F32, [n], 0).unwrap();
        assert_eq!(w.data_ptr(), yptr, "same-stream reuse");
        // dropped without any work queued on it
    }
    let z = rt.empty(DType::F32, [n], 0).unwrap();
    assert_ne!(z.data_ptr(), yptr, "the default stream got a block the queued Relu still writes");
    g.open().unwrap();
    s.synchronize().unwrap();
    drop((z, x));
}

#[test]
fn host_filled_tensor_on_a_scoped_stream_does_not_overwrite_queued_inputs() {
    let (g, rt) = gated_runtime(true);
    let s = rt.stream(0).unwrap();
    let n = 1024; // 4 KiB
    let a_data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let out = {
        let _scope = rt.stream_scope(&s);
        let a = rt.from_slice(&a_data, [n], 0).unwrap();
        let out = rt.empty(DType::F32, [n], 0).unwrap(); // fills a's segment
        g.block(0, s.id());
        rt.execute(&Op::Relu, &[&a], &[&out]).unwrap();
        drop(a); // its block is pending on `s`
        // Same size, same stream: the pool hands a's block over, and the host copy of
        // from_slice must then wait for the queued Relu that still reads it.
        let b = rt.from_slice(&vec![-1f32; n], [n], 0).unwrap();
        drop(b);
        out
    };
    g.open().unwrap();
    s.synchronize().unwrap();
    let got = out.to_ndarray::<f32>().unwrap();
    let wrong = got.iter().zip(&a_data).filter(|(g, w)| g != w).count();
    assert_eq!(wrong, 0, "{wrong} of {n} outputs wrong: the queued Relu read data written later from the host");
}

#[test]
fn strided_input_copy_does_not_reuse_memory_pending_on_another_stream() {
    let (g, rt) = gated_runtime(true);
    let s = rt.stream(0).unwrap();
    let busy = rt.stream(0).unwrap();
    let (r, c) = (32usize, 32usize); // 4 KiB tensors
    let t_data: Vec<f32> = (0..r * c).map(|i| i as f32).collect();
    let t = rt.from_slice(&t_data, [r, c], 0).unwrap();
    let out_busy = rt.empty(DType::F32, [r, c], 0).unwrap(); // fills t's segment
    let x = rt.from_slice(&vec![-3f32; r * c], [r, c], 0).unwrap();
    let out_s = rt.empty(DType::F32, [r, c], 0).unwrap();
    let xt = x.transpose(0, 1).unwrap();
    assert!(!xt.is_contiguous());
    g.block(0, busy.id());
    rt.execute_on(&busy, &Op::Relu, &[&t], &[&out_busy]).unwrap();
    drop(t); // pending on `busy`
    {
        // The scope names `busy`, but the op runs on `s`: its temporary copy of `xt` is
        // written by `s` and must not take t's block.
        let _scope = rt.stream_scope(&busy);
        rt.execute_on(&s, &Op::Relu, &[&xt], &[&out_s]).unwrap();
    }
    s.synchronize().unwrap();
    g.open().unwrap();
    busy.synchronize().unwrap();
    let got = out_busy.to_ndarray::<f32>().unwrap();
    let wrong = got.iter().zip(&t_data).filter(|(g, w)| g != w).count();
    assert_eq!(
        wrong,
        0,
        "{wrong} of {} outputs wrong: the queued Relu on `busy` read memory another stream overwrote",
        r * c
    );
    assert!(out_s.to_ndarray::<f32>().unwrap().iter().all(|v| *v == 0.0));
}

use npurt_test_support::gate;

#[path = "pool/small_limit.rs"]
mod small_limit;
