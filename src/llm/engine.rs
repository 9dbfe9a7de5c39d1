//! The generation loop: sequences are admitted while the KV cache has blocks for them,
//! prefilled together, then decoded together one token per step; a sequence that finishes
//! leaves and a waiting one joins between steps (continuous batching). Graphs are
//! compiled once per bucket (prefill: batch × tokens, decode: batch) and kept.

use super::blocks::{BlockError, BlockManager, SeqId};
use super::options::{FinishReason, LlmOptions};
use super::sampler::Sampler;
use crate::models::llama::{self, CacheShape, LlamaConfig, LlamaSource, LlamaWeights, RopeTables, Step};
use runtime::graph::{CompileOptions, CompiledGraph, RunProfile, SharedConstants};
use runtime::{DType, Error, Result, Tensor};
use std::collections::{HashMap, VecDeque};

/// One prompt to continue.
pub(crate) struct Request {
    pub ids: Vec<u32>,
    pub sampler: Sampler,
    pub stops: Vec<u32>,
    pub max_new: usize,
}

/// A token as it is chosen.
pub(crate) struct Emitted<'a> {
    pub index: usize,
    pub token: u32,
    pub logits: &'a [f32],
    pub finish: Option<FinishReason>,
}

struct Running {
    index: usize,
    seq: SeqId,
    /// Tokens in the cache.
    len: usize,
    /// The last token chosen (fed to the next step).
    last: u32,
    generated: usize,
    /// Generated tokens at most (`max_new`, capped by the position table).
    limit: usize,
}

/// The bucket of `n`: the next power of two, at least `min`, at most `max` (and `n`).
pub(crate) fn bucket(n: usize, min: usize, max: usize) -> usize {
    n.max(min).checked_next_power_of_two().unwrap_or(usize::MAX).min(max).max(n)
}

/// A model loaded on a device with its KV caches. `Send`; used through `&mut self`.
///
/// The weights live once, in the compiled graphs' shared constants (on the CPU those are
/// host memory; on a device, device memory): the host copy read at load is handed to the
/// first compile, which frees each weight as it uploads it, and a later shape bucket reads
/// the weights again from their source (the memory-mapped files, or the seed of random
/// ones) for as long as its own compile takes.
pub(crate) struct Engine {
    rt: runtime::Runtime,
    pub config: LlamaConfig,
    /// The weights read at load, until the first compile takes them.
    weights: Option<LlamaWeights>,
    /// Where to read the weights again for another bucket.
    source: LlamaSource,
    /// Bytes of the weights (merged, f32), and of those a decode step reads.
    pub weight_bytes: usize,
    pub weight_bytes_per_token: usize,
    rope: RopeTables,
    pub cache: CacheShape,
    pub max_batch: usize,
    pub max_seq_len: usize,
    compile: CompileOptions,
    pub constants: SharedConstants,
    pub graphs: HashMap<Step, CompiledGraph>,
    /// Each layer's key then value cache.
    caches: Vec<Tensor>,
    blocks: BlockManager,
    next_seq: SeqId,
    /// Whether decode steps run node by node with their timings kept (`Llm::set_decode_profiling`).
    pub profiling: bool,
    /// The latest decode step's profile, while `profiling`.
    pub last_decode_profile: Option<RunProfile>,
}

impl Engine {
    pub fn new(
        rt: &runtime::Runtime,
        config: LlamaConfig,
        weights: LlamaWeights,
        source: LlamaSource,
        o: &LlmOptions,
    ) -> Result<Engine> {
        if o.max_batch == 0 || o.block_size == 0 {
            return Err(Error::Config("llm: max_batch and block_size must be at least 1".into()));
        }
        let max_seq_len = o.max_seq_len.unwrap_or(2048).min(config.max_position_embeddings).max(1);
        let max_blocks = max_seq_len.div_ceil(o.block_size);
        let num_blocks = match o.num_blocks {
            Some(n) => n,
            None => max_blocks
                .checked_mul(o.max_batch)
                .ok_or_else(|| Error::Config("llm: max_batch x max_seq_len overflows".into()))?,
        };
        // A decode step streams every weight once per token: bf16 weights halve that
        // even on a CPU that widens them to f32 in each product.
        let compile =
            CompileOptions { store_slow_precision: true, ..CompileOptions::from_config(rt.config(), o.device) };
        let dtype = match o.kv_cache_dtype {
            Some(d @ (DType::F32 | DType::F16 | DType::BF16)) => d,
            Some(d) => return Err(Error::Config(format!("llm: KV caches are f32, f16 or bf16, not {d}"))),
            None => CacheShape::dtype_for(compile.precision.resolve(rt.auto_precision(o.device)?)),
        };
        let cache = CacheShape { num_blocks, block_size: o.block_size, max_blocks, dtype };
        let bytes = cache.bytes(&config).ok_or_else(|| Error::Config("llm: the KV cache size overflows".into()))?;
        log::info!(
            "llm: KV cache {num_blocks} blocks of {} tokens in {dtype}, {:.1} MiB",
            o.block_size,
            bytes as f64 / 1048576.0
        );
        let blocks = BlockManager::new(num_blocks, o.block_size)?;
        let mut caches = Vec::with_capacity(2 * config.num_hidden_layers);
        for _ in 0..2 * config.num_hidden_layers {
            caches.push(rt.zeros(dtype, cache.dims(&config), o.device)?);
        }
        let rope = RopeTables::new(&config, max_seq_len)?;
        // A decode step reads every weight but an untied embedding table, of which it reads
        // one row per sequence.
        let weight_bytes = weights.bytes();
        let untied_embed = if weights.lm_head.is_some() { weights.embed.bytes.len() } else { 0 };
        Ok(Engine {
            rt: rt.clone(),
            rope,
            cache,
            max_batch: o.max_batch,
            max_seq_len,
            compile,
            constants: SharedConstants::new(),
            graphs: HashMap::new(),
            caches,
            blocks,
            next_seq: 0,
            profiling: false,
            last_decode_profile: None,
            config,
            weight_bytes,
            weight_bytes_per_token: weight_bytes - untied_embed,
            weights: Some(weights),
            source,
        })
    }

    /// Bytes of weights the engine holds on the host beside the compiled graphs' constants
    /// (those read at load until the first compile; 0 after it).
    pub fn host_weight_bytes(&self) -> usize {
        self.weights.as_ref().map_or(0, LlamaWeights::bytes)
    }

    pub fn device(&self) -> usize {
        self.compile.device
    }

    /// The compiled graph of `step`, compiled now unless cached.
    pub fn graph(&mut self, step: Step) -> Result<&CompiledGraph> {
        if !self.graphs.contains_key(&step) {
            let t = std::time::Instant::now();
            // The graph holds the only host copy of the weights, which its compile frees as
            // it uploads each (or finds it in `constants`).
            let weights = match self.weights.take() {
                Some(w) => w,
                None => llama::load(&self.config, self.source.clone())?,
            };
            let g = llama::build(&self.config, &weights, &self.rope, self.cache, step)?;
            drop(weights);
            let c = CompiledGraph::compile_shared(&self.rt, g.graph, self.compile.clone(), &self.constants)?;
            log::debug!("llm: compiled {step:?} in {:?}", t.elapsed());
            self.graphs.insert(step, c);
        }
        self.graphs.get(&step).ok_or_else(|| Error::invalid("Llm", "a compiled graph went missing"))
    }

    fn run(&mut self, step: Step, inputs: Vec<Tensor>) -> Result<Vec<f32>> {
        let caches = std::mem::take(&mut self.caches);
        let profiled = self.profiling && matches!(step, Step::Decode { .. });
        let r = (|| -> Result<(Vec<f32>, Option<RunProfile>)> {
            let g = self.graph(step)?;
            let refs: Vec<&Tensor> = inputs.iter().chain(&caches).collect();
            let (outs, profile) = if profiled {
                let (o, p) = g.run_profiled(&refs)?;
                (o, Some(p))
            } else {
                (g.run(&refs)?, None)
            };
            let out = outs.first().ok_or_else(|| Error::invalid("Llm", "the decoder returned no output"))?;
            Ok((out.to_ndarray::<f32>()?.iter().copied().collect(), profile))
        })();
        self.caches = caches;
        let (logits, profile) = r?;
        if profile.is_some() {
            self.last_decode_profile = profile;
        }
        Ok(logits)
    }

    /// Tokens a sequence of `r` holds in the cache at most.
    fn final_len(&self, r: &Request) -> usize {
        (r.ids.len() + r.max_new.saturating_sub(1)).min(self.max_seq_len)
    }

    /// Blocks the running sequences still need to reach their final length.
    fn reserved(&self, running: &[Running]) -> usize {
        running
            .iter()
            .map(|r| {
                let last = r.len + r.limit.saturating_sub(r.generated);
                self.blocks.blocks_for(last).saturating_sub(self.blocks.blocks_for(r.len))
            })
            .sum()
    }

    /// Generates for every request, calling `on` with each token as it is chosen; returns
    /// each request's tokens and why it stopped.
    pub fn generate(
        &mut self,
        requests: &mut [Request],
        on: &mut dyn FnMut(Emitted<'_>) -> Result<()>,
    ) -> Result<Vec<(Vec<u32>, FinishReason)>> {
        // A call holds the engine from start to end, so sequences found here were left by
        // a call that panicked (in a callback): their blocks go back to the pool.
        if self.blocks.sequences() > 0 {
            log::warn!(
                "llm: {} sequence(s) left by an interrupted call; freeing their blocks",
                self.blocks.sequences()
            );
            self.blocks = BlockManager::new(self.cache.num_blocks, self.cache.block_size)?;
        }
        let mut out: Vec<(Vec<u32>, FinishReason)> = vec![(Vec::new(), FinishReason::Length); requests.len()];
        let mut waiting: VecDeque<usize> = VecDeque::new();
        for (i, r) in requests.iter().enumerate() {
            if r.ids.is_empty() {
                return Err(Error::Config(format!("llm: prompt {i} is empty")));
            }
            if r.ids.len() > self.max_seq_len {
                return Err(Error::Config(format!(
                    "llm: prompt {i} has {} tokens, more than max_seq_len {}",
                    r.ids.len(),
                    self.max_seq_len
                )));
            }
            if let Some(&t) = r.ids.iter().find(|&&t| t as usize >= self.config.vocab_size) {
                return Err(Error::Config(format!(
                    "llm: prompt {i} holds token {t}, past vocab_size {}",
                    self.config.vocab_size
                )));
            }
            if r.max_new > 0 {
                waiting.push_back(i);
            }
        }
        let mut running: Vec<Running> = Vec::new();
        let result = self.schedule(requests, &mut waiting, &mut running, &mut out, on);
        // Whatever happened, the cache's blocks go back to the pool.
        for r in running.drain(..) {
            self.blocks.free(r.seq).ok();
        }
        result.map(|()| out)
    }

    fn schedule(
        &mut self,
        requests: &mut [Request],
        waiting: &mut VecDeque<usize>,
        running: &mut Vec<Running>,
        out: &mut [(Vec<u32>, FinishReason)],
        on: &mut dyn FnMut(Emitted<'_>) -> Result<()>,
    ) -> Result<()> {
        loop {
            let mut admitted = Vec::new();
            let mut reserved = self.reserved(running);
            while running.len() + admitted.len() < self.max_batch
                && let Some(&i) = waiting.front()
            {
                let need = self.blocks.blocks_for(self.final_len(&requests[i]));
                if need + reserved > self.blocks.free_blocks() {
                    break;
                }
                reserved += need;
                waiting.pop_front();
                admitted.push(i);
            }
            if admitted.is_empty() && running.is_empty() {
                return match waiting.front() {
                    None => Ok(()),
                    Some(&i) => Err(BlockError::OutOfBlocks {
                        needed: self.blocks.blocks_for(self.final_len(&requests[i])),
                        free: self.blocks.free_blocks(),
                        total: self.blocks.num_blocks(),
                    }
                    .into()),
                };
            }
            if admitted.is_empty() {
                self.decode(requests, running, out, on)?;
            } else {
                self.prefill(requests, &admitted, running, out, on)?;
            }
            let mut kept = Vec::with_capacity(running.len());
            for r in running.drain(..) {
                if r.generated == usize::MAX {
                    self.blocks.free(r.seq)?;
                } else {
                    kept.push(r);
                }
            }
            *running = kept;
        }
    }

    /// Records token `t` drawn for `r` from `logits`; marks `r` finished (`generated ==
    /// usize::MAX`) when it stops.
    fn take(
        r: &mut Running,
        t: u32,
        logits: &[f32],
        req: &Request,
        out: &mut [(Vec<u32>, FinishReason)],
        on: &mut dyn FnMut(Emitted<'_>) -> Result<()>,
    ) -> Result<()> {
        r.generated += 1;
        r.last = t;
        out[r.index].0.push(t);
        let finish = if req.stops.contains(&t) {
            Some(FinishReason::Stop)
        } else if r.generated >= r.limit {
            Some(FinishReason::Length)
        } else {
            None
        };
        if let Some(f) = finish {
            out[r.index].1 = f;
            r.generated = usize::MAX;
        }
        on(Emitted { index: r.index, token: t, logits, finish })
    }

    fn prefill(
        &mut self,
        requests: &mut [Request],
        admitted: &[usize],
        running: &mut Vec<Running>,
        out: &mut [(Vec<u32>, FinishReason)],
        on: &mut dyn FnMut(Emitted<'_>) -> Result<()>,
    ) -> Result<()> {
        let longest = admitted.iter().map(|&i| requests[i].ids.len()).max().unwrap_or(1);
        let b = bucket(admitted.len(), 1, usize::MAX);
        let s = bucket(longest, 16, self.max_seq_len);
        let (mut ids, mut pos, mut slots, mut last) =
            (vec![0i64; b * s], vec![0i64; b * s], vec![-1i64; b * s], vec![0i64; b]);
        let mut fresh = Vec::with_capacity(admitted.len());
        for (row, &i) in admitted.iter().enumerate() {
            let p = &requests[i].ids;
            let seq = self.next_seq;
            self.next_seq += 1;
            self.blocks.add(seq)?;
            // Tracked as running from here, so that an error frees its blocks.
            let limit = requests[i].max_new.min(self.max_seq_len + 1 - p.len());
            running.push(Running { index: i, seq, len: p.len(), last: 0, generated: 0, limit });
            fresh.push(running.len() - 1);
            let got = self.blocks.append(seq, p.len())?;
            for (j, (&t, &slot)) in p.iter().zip(&got).enumerate() {
                ids[row * s + j] = t as i64;
                slots[row * s + j] = slot as i64;
            }
            for j in 0..s {
                pos[row * s + j] = j as i64;
            }
            last[row] = (row * s + p.len() - 1) as i64;
        }
        let dev = self.device();
        let inputs = vec![
            self.rt.from_slice(&ids, [b, s], dev)?,
            self.rt.from_slice(&pos, [b, s], dev)?,
            self.rt.from_slice(&slots, [b * s], dev)?,
            self.rt.from_slice(&last, [b], dev)?,
        ];
        let logits = self.run(Step::Prefill { batch: b, seq: s }, inputs)?;
        let v = self.config.vocab_size;
        for (row, &k) in fresh.iter().enumerate() {
            let r = &mut running[k];
            let req = &mut requests[r.index];
            let l = &logits[row * v..(row + 1) * v];
            let t = req.sampler.sample(l);
            Self::take(r, t, l, req, out, on)?;
        }
        Ok(())
    }

    fn decode(
        &mut self,
        requests: &mut [Request],
        running: &mut [Running],
        out: &mut [(Vec<u32>, FinishReason)],
        on: &mut dyn FnMut(Emitted<'_>) -> Result<()>,
    ) -> Result<()> {
        let n = running.len();
        let b = bucket(n, 1, usize::MAX);
        let mb = self.cache.max_blocks;
        let (mut ids, mut pos, mut slots) = (vec![0i64; b], vec![0i64; b], vec![-1i64; b]);
        let (mut tables, mut lens) = (vec![0i32; b * mb], vec![0i32; b]);
        for (row, r) in running.iter_mut().enumerate() {
            let slot = self.blocks.append(r.seq, 1)?;
            ids[row] = r.last as i64;
            pos[row] = r.len as i64;
            slots[row] = slot[0] as i64;
            r.len += 1;
            lens[row] = r.len as i32;
            tables[row * mb..(row + 1) * mb].copy_from_slice(&self.blocks.block_table(r.seq, mb)?);
        }
        let dev = self.device();
        let inputs = vec![
            self.rt.from_slice(&ids, [b], dev)?,
            self.rt.from_slice(&pos, [b, 1], dev)?,
            self.rt.from_slice(&slots, [b], dev)?,
            self.rt.from_slice(&tables, [b, mb], dev)?,
            self.rt.from_slice(&lens, [b], dev)?,
        ];
        let logits = self.run(Step::Decode { batch: b }, inputs)?;
        let v = self.config.vocab_size;
        for (row, r) in running.iter_mut().enumerate() {
            let req = &mut requests[r.index];
            let l = &logits[row * v..(row + 1) * v];
            let t = req.sampler.sample(l);
            Self::take(r, t, l, req, out, on)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn buckets_are_powers_of_two_within_bounds() {
        use super::bucket;
        assert_eq!(bucket(1, 16, 512), 16);
        assert_eq!(bucket(17, 16, 512), 32);
        assert_eq!(bucket(300, 16, 400), 400);
        assert_eq!(bucket(3, 1, usize::MAX), 4);
        assert_eq!(bucket(8, 1, usize::MAX), 8);
    }
}
