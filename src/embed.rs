//! Sentence embeddings from a sentence-transformers model directory (e.g.
//! `all-MiniLM-L6-v2`), computed the way sentence-transformers computes them.
//!
//! The directory has the Hugging Face layout; nothing is downloaded:
//!
//! * `tokenizer.json` — the Hugging Face tokenizer (the `tokenizers` crate);
//! * `config.json` + `model.safetensors` — the BERT encoder ([`bert::build`]);
//! * `sentence_bert_config.json` — `max_seq_length` (truncation) and `do_lower_case`;
//! * `modules.json` — the pipeline: Transformer, then Pooling (its folder's
//!   `config.json` says which pooling), then optionally Normalize (L2).
//!
//! [`Embedder::embed`] tokenises, sorts the texts by length, runs them in batches padded to
//! the longest sequence of each batch (padding is masked out: a text's embedding does not
//! depend on its batch), pools over the attention mask, normalises, and returns the
//! embeddings in input order. A graph is compiled per `(batch, seq)` shape and kept in a
//! bounded cache.
//!
//! ```no_run
//! let rt = npurt::Runtime::new()?;
//! let mut e = npurt::embed::Embedder::from_dir(&rt, "target/test-assets/all-MiniLM-L6-v2")?;
//! let v = e.embed(&["The quick brown fox.", "Hello!"])?;
//! assert_eq!(v[0].len(), e.dimension());
//! # Ok::<(), npurt::Error>(())
//! ```

use crate::models::bert::{self, BertConfig, Weights};
use crate::models::safetensors::SafetensorsFile;
use runtime::graph::{CompileOptions, CompiledGraph, SharedConstants};
use runtime::{Error, Result, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

/// How token embeddings become one sentence embedding (`1_Pooling/config.json`). When
/// several modes are on, their results are concatenated in this order: CLS, max, mean,
/// mean/sqrt(len), as sentence-transformers does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pooling {
    pub cls: bool,
    pub max: bool,
    pub mean: bool,
    pub mean_sqrt_len: bool,
}

impl Pooling {
    /// Mean over the attention mask (the sentence-transformers default).
    pub fn mean() -> Pooling {
        Pooling { cls: false, max: false, mean: true, mean_sqrt_len: false }
    }

    /// Parses a sentence-transformers `1_Pooling/config.json`.
    pub fn from_json(text: &str, origin: &str) -> Result<Pooling> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::format_from(origin.to_string(), e))?;
        let flag = |k: &str| -> Result<bool> { Ok(json_bool(&v, k, origin)?.unwrap_or(false)) };
        for k in ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"] {
            if flag(k)? {
                return Err(Error::Unsupported(format!("{origin}: {k} (supported: cls, max, mean, mean_sqrt_len)")));
            }
        }
        if json_bool(&v, "include_prompt", origin)? == Some(false) {
            return Err(Error::Unsupported(format!("{origin}: include_prompt false")));
        }
        let p = Pooling {
            cls: flag("pooling_mode_cls_token")?,
            max: flag("pooling_mode_max_tokens")?,
            mean: flag("pooling_mode_mean_tokens")?,
            mean_sqrt_len: flag("pooling_mode_mean_sqrt_len_tokens")?,
        };
        if p.modes() == 0 {
            return Err(Error::format(format!("{origin}: no pooling mode is enabled")));
        }
        Ok(p)
    }

    fn modes(&self) -> usize {
        [self.cls, self.max, self.mean, self.mean_sqrt_len].iter().filter(|b| **b).count()
    }

    /// Pools `hidden` (`[len, h]` row-major, rows of real tokens only) into `modes * h`
    /// values.
    fn pool(&self, hidden: &[f32], len: usize, h: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.modes() * h);
        if self.cls {
            out.extend_from_slice(&hidden[..h.min(hidden.len())]);
        }
        if self.max {
            let mut m = vec![f32::NEG_INFINITY; h];
            for row in hidden.chunks_exact(h).take(len) {
                for (a, &x) in m.iter_mut().zip(row) {
                    *a = a.max(x);
                }
            }
            out.extend(m);
        }
        if self.mean || self.mean_sqrt_len {
            let mut sum = vec![0f64; h];
            for row in hidden.chunks_exact(h).take(len) {
                for (a, &x) in sum.iter_mut().zip(row) {
                    *a += x as f64;
                }
            }
            let n = (len as f64).max(1e-9);
            if self.mean {
                out.extend(sum.iter().map(|s| (s / n) as f32));
            }
            if self.mean_sqrt_len {
                out.extend(sum.iter().map(|s| (s / n.sqrt()) as f32));
            }
        }
        out
    }
}

/// Settings of an [`Embedder`] beyond what the model directory says.
#[derive(Clone, Debug)]
pub struct EmbedOptions {
    /// Texts per forward pass (default 32, as sentence-transformers).
    pub batch_size: usize,
    /// Device index of the runtime to run on.
    pub device: usize,
    /// Compiled graphs kept (least recently used dropped first). Each holds its own copy
    /// of the weights on the device (about 90 MB for MiniLM-L6), so keep this small.
    pub max_cached_graphs: usize,
    /// Override of `max_seq_length` (truncation); `None` reads `sentence_bert_config.json`.
    pub max_seq_length: Option<usize>,
    /// Pad each batch to the longest sequence rounded up to a multiple of this (default 1:
    /// exactly the longest). Larger values mean fewer distinct shapes, so fewer compiles,
    /// at the price of more padding; results do not change (padding is masked).
    pub pad_to_multiple_of: usize,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { batch_size: 32, device: 0, max_cached_graphs: 8, max_seq_length: None, pad_to_multiple_of: 1 }
    }
}

/// Timing of one forward pass of [`Embedder::embed_with_stats`].
#[derive(Clone, Debug)]
pub struct BatchStats {
    /// Texts in the batch.
    pub sentences: usize,
    /// Padded sequence length (the longest text of the batch, in tokens).
    pub seq: usize,
    /// Real (unpadded) tokens in the batch.
    pub tokens: usize,
    /// Time spent compiling the graph for this shape (`None`: it was cached).
    pub compile: Option<Duration>,
    /// Upload, forward pass, download and pooling (compile excluded).
    pub run: Duration,
}

/// What one [`Embedder::embed_with_stats`] call spent.
#[derive(Clone, Debug, Default)]
pub struct EmbedStats {
    /// Tokenising every text of the call.
    pub tokenize: Duration,
    /// One entry per batch, in execution order (longest texts first).
    pub batches: Vec<BatchStats>,
}

impl EmbedStats {
    /// Total time of the call (tokenising, compiles and batches).
    pub fn total(&self) -> Duration {
        self.tokenize + self.batches.iter().map(|b| b.run + b.compile.unwrap_or_default()).sum::<Duration>()
    }
}

/// The token ids, segment ids and real length of one tokenised text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

/// The last hidden state of one text: `[ids.len(), hidden_size]`, row-major, padding rows
/// removed.
#[derive(Clone, Debug)]
pub struct TokenEmbeddings {
    pub ids: Vec<u32>,
    pub hidden_size: usize,
    pub values: Vec<f32>,
}

struct CachedGraph {
    graph: CompiledGraph,
    last_used: u64,
}

/// A sentence-transformers model on an npurt runtime. See the [module docs](self).
///
/// `Send` but used through `&mut self` (it caches a compiled graph per input shape): give
/// each thread its own embedder, or share one behind a `Mutex`.
pub struct Embedder {
    rt: runtime::Runtime,
    dir: PathBuf,
    tokenizer: Tokenizer,
    config: BertConfig,
    weights: Arc<SafetensorsFile>,
    pooling: Pooling,
    normalize: bool,
    do_lower_case: bool,
    max_seq_length: usize,
    pad_id: u32,
    options: EmbedOptions,
    graphs: HashMap<(usize, usize), CachedGraph>,
    /// The weights' device copies (and packed forms), shared by every compiled shape.
    constants: SharedConstants,
    clock: u64,
}

/// A JSON file of the model directory as text: a regular file of at most
/// [`crate::files::MAX_JSON_BYTES`].
fn read_text(path: &Path) -> Result<String> {
    Ok(crate::files::read_json_text(path)?)
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    serde_json::from_str(&read_text(path)?).map_err(|e| Error::format_from(path.display().to_string(), e))
}

/// Whether an optional file of the model directory is there: anything at `path`, a
/// broken link included, counts (and is then read, or refused naming it); only a path
/// that names nothing is absent.
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn bad_value(origin: &str, key: &str, expected: &str, found: &serde_json::Value) -> Error {
    Error::format(format!("{origin}: {key} must be {expected}, not {found}"))
}

/// The boolean `key` of `v` (`None` when absent); any other value is an error naming it.
fn json_bool(v: &serde_json::Value, key: &str, origin: &str) -> Result<Option<bool>> {
    match v.get(key) {
        None => Ok(None),
        Some(x) => x.as_bool().map(Some).ok_or_else(|| bad_value(origin, key, "true or false", x)),
    }
}

/// The non-negative integer `key` of `v` (`None` when absent); any other value is an
/// error naming it.
fn json_uint(v: &serde_json::Value, key: &str, origin: &str) -> Result<Option<usize>> {
    match v.get(key) {
        None => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| bad_value(origin, key, "a non-negative integer", x)),
    }
}

impl Embedder {
    /// Loads the model directory `dir` with default [`EmbedOptions`].
    pub fn from_dir(rt: &runtime::Runtime, dir: impl AsRef<Path>) -> Result<Embedder> {
        Embedder::from_dir_with(rt, dir, EmbedOptions::default())
    }

    /// Loads the model directory `dir`.
    pub fn from_dir_with(rt: &runtime::Runtime, dir: impl AsRef<Path>, options: EmbedOptions) -> Result<Embedder> {
        let dir = dir.as_ref().to_path_buf();
        Self::check_options(&options)?;
        rt.device_info(options.device)?;
        if !dir.is_dir() {
            let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "not a model directory");
            let name =
                if dir.as_os_str().is_empty() { "\"\" (an empty path)".to_string() } else { dir.display().to_string() };
            return Err(Error::io(name, missing));
        }
        let config = BertConfig::from_file(dir.join("config.json"))?;

        // The pipeline: Transformer -> Pooling -> [Normalize].
        let (pooling, normalize) = Self::read_modules(&dir, config.hidden_size)?;
        let (max_seq_length, do_lower_case) = Self::read_truncation(&dir, &config, &options)?;
        let (tokenizer, pad_id) = Self::read_tokenizer(&dir, &config, max_seq_length)?;
        let weights = Self::read_weights(&dir, &config)?;

        log::info!(
            "embedder: {} ({} layers, hidden {}, max_seq_length {max_seq_length}, pooling {pooling:?}, normalize {normalize})",
            dir.display(),
            config.num_hidden_layers,
            config.hidden_size
        );
        Ok(Embedder {
            rt: rt.clone(),
            dir,
            tokenizer,
            config,
            weights,
            pooling,
            normalize,
            do_lower_case,
            max_seq_length,
            pad_id,
            options,
            graphs: HashMap::new(),
            constants: SharedConstants::new(),
            clock: 0,
        })
    }

    /// The options' counts are at least 1.
    fn check_options(options: &EmbedOptions) -> Result<()> {
        if options.batch_size == 0 {
            return Err(Error::Config("embed: batch size must be at least 1".into()));
        }
        if options.max_cached_graphs == 0 {
            return Err(Error::Config("embed: max_cached_graphs must be at least 1".into()));
        }
        if options.pad_to_multiple_of == 0 {
            return Err(Error::Config("embed: pad_to_multiple_of must be at least 1".into()));
        }
        Ok(())
    }

    /// Truncation length and lower-casing (sentence_bert_config.json), the length overridden
    /// by the options and capped at max_position_embeddings.
    fn read_truncation(dir: &Path, config: &BertConfig, options: &EmbedOptions) -> Result<(usize, bool)> {
        let sb_path = dir.join("sentence_bert_config.json");
        let (mut max_seq_length, do_lower_case) = if present(&sb_path) {
            let v = read_json(&sb_path)?;
            let origin = sb_path.display().to_string();
            if !v.is_object() {
                return Err(Error::format(format!("{origin}: the top level is not an object")));
            }
            (
                json_uint(&v, "max_seq_length", &origin)?.unwrap_or(config.max_position_embeddings),
                json_bool(&v, "do_lower_case", &origin)?.unwrap_or(false),
            )
        } else {
            log::warn!("{}: absent; truncating to max_position_embeddings", sb_path.display());
            (config.max_position_embeddings, false)
        };
        if let Some(m) = options.max_seq_length {
            max_seq_length = m;
        }
        if max_seq_length > config.max_position_embeddings {
            log::warn!(
                "max_seq_length {max_seq_length} exceeds max_position_embeddings {}; using the latter",
                config.max_position_embeddings
            );
            max_seq_length = config.max_position_embeddings;
        }
        Ok((max_seq_length, do_lower_case))
    }

    /// The tokenizer with our truncation and no padding (batches are padded here), and its
    /// padding id; every id it can produce must index the embedding table.
    fn read_tokenizer(dir: &Path, config: &BertConfig, max_seq_length: usize) -> Result<(Tokenizer, u32)> {
        let tok_path = dir.join("tokenizer.json");
        let text = read_text(&tok_path)?;
        let mut tokenizer =
            Tokenizer::from_bytes(text).map_err(|e| Error::format(format!("{}: {e}", tok_path.display())))?;
        let tokens = tokenizer.get_vocab_size(true);
        if tokens > config.vocab_size {
            return Err(Error::format(format!(
                "{}: {tokens} tokens, more than config.json vocab_size {}",
                tok_path.display(),
                config.vocab_size
            )));
        }
        // Every id the tokenizer can produce must index the embedding table.
        if let Some((token, id)) = tokenizer
            .get_vocab(true)
            .into_iter()
            .filter(|(_, id)| *id as usize >= config.vocab_size)
            .min_by_key(|t| t.1)
        {
            return Err(Error::format(format!(
                "{}: token {token:?} has id {id}, past config.json vocab_size {}",
                tok_path.display(),
                config.vocab_size
            )));
        }
        let special = tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(false));
        if max_seq_length <= special {
            return Err(Error::Config(format!(
                "embed: max_seq_length {max_seq_length} leaves no room beside {special} special tokens"
            )));
        }
        let pad_id = tokenizer.get_padding().map(|p| p.pad_id).or_else(|| tokenizer.token_to_id("[PAD]")).unwrap_or(0);
        if pad_id as usize >= config.vocab_size {
            return Err(Error::format(format!(
                "{}: padding id {pad_id} is past config.json vocab_size {}",
                tok_path.display(),
                config.vocab_size
            )));
        }
        let trunc = match tokenizer.get_truncation() {
            Some(t) => TruncationParams { max_length: max_seq_length, stride: 0, ..t.clone() },
            None => TruncationParams { max_length: max_seq_length, ..TruncationParams::default() },
        };
        tokenizer.with_truncation(Some(trunc)).map_err(|e| Error::Config(format!("embed: truncation: {e}")))?;
        tokenizer.with_padding(None);
        Self::check_type_ids(&tokenizer, &tok_path, config)?;
        Ok((tokenizer, pad_id))
    }

    /// Every segment id the post-processor gives a text (its special tokens' and the
    /// text's own) indexes the token-type table of `config.json`.
    fn check_type_ids(tokenizer: &Tokenizer, tok_path: &Path, config: &BertConfig) -> Result<()> {
        // One token through the post-processor, as `encode` would send a text of one token.
        let one = tokenizers::Encoding::from_tokens(vec![tokenizers::Token::new(0, "a".into(), (0, 1))], 0);
        let probe = tokenizer
            .post_process(one, None, true)
            .map_err(|e| Error::format(format!("{}: post_processor: {e}", tok_path.display())))?;
        match probe.get_type_ids().iter().copied().max() {
            Some(t) if t as usize >= config.type_vocab_size => Err(Error::format(format!(
                "{}: post_processor gives type id {t}, past config.json type_vocab_size {}",
                tok_path.display(),
                config.type_vocab_size
            ))),
            _ => Ok(()),
        }
    }

    /// The weights, mapped, and copied out for each graph build (the compiled graph keeps
    /// the device copy; the host copy is freed as it is uploaded); checked against the
    /// config now.
    fn read_weights(dir: &Path, config: &BertConfig) -> Result<Arc<SafetensorsFile>> {
        let st = dir.join("model.safetensors");
        let weights = Arc::new(SafetensorsFile::open(&st)?);
        // Fail now, not at the first text, if the weights do not fit the config or are not
        // finite.
        bert::build(config, Weights::File(weights.clone()), 1, 1).map_err(|e| match e {
            e @ (Error::Io { .. } | Error::Format { .. }) => Error::format_from(st.display().to_string(), e),
            e => Error::format(format!("{}: {e}", st.display())),
        })?;
        Ok(weights)
    }

    fn read_modules(dir: &Path, hidden: usize) -> Result<(Pooling, bool)> {
        let path = dir.join("modules.json");
        if !present(&path) {
            log::warn!("{}: absent; using mean pooling without normalisation", path.display());
            return Ok((Pooling::mean(), false));
        }
        let v = read_json(&path)?;
        let modules = v.as_array().ok_or_else(|| Error::format(format!("{}: not a list", path.display())))?;
        let mut pooling = None;
        let mut normalize = false;
        for (i, m) in modules.iter().enumerate() {
            let ty = m.get("type").and_then(|t| t.as_str()).unwrap_or("");
            let kind = ty.rsplit('.').next().unwrap_or(ty);
            match kind {
                "Transformer" if i == 0 => {}
                "Pooling" if pooling.is_none() && !normalize => {
                    let sub = m.get("path").and_then(|p| p.as_str()).unwrap_or("1_Pooling");
                    let cfg = dir.join(sub).join("config.json");
                    let text = read_text(&cfg)?;
                    let origin = cfg.display().to_string();
                    let p = Pooling::from_json(&text, &origin)?;
                    let c: serde_json::Value =
                        serde_json::from_str(&text).map_err(|e| Error::format_from(origin.to_string(), e))?;
                    let width = json_uint(&c, "word_embedding_dimension", &origin)?;
                    if let Some(w) = width.filter(|&w| w != hidden) {
                        return Err(Error::format(format!(
                            "{}: word_embedding_dimension {w} but config.json hidden_size is {hidden}",
                            cfg.display()
                        )));
                    }
                    pooling = Some(p);
                }
                "Normalize" if pooling.is_some() && !normalize => normalize = true,
                _ => {
                    return Err(Error::Unsupported(format!(
                        "{}: module {i} of type {ty:?} (supported: Transformer, Pooling, Normalize, in that order)",
                        path.display()
                    )));
                }
            }
        }
        let pooling = pooling.ok_or_else(|| Error::Unsupported(format!("{}: no Pooling module", path.display())))?;
        Ok((pooling, normalize))
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The encoder's configuration (`config.json`).
    pub fn config(&self) -> &BertConfig {
        &self.config
    }
    /// Length of an embedding.
    pub fn dimension(&self) -> usize {
        self.pooling.modes() * self.config.hidden_size
    }
    pub fn pooling(&self) -> &Pooling {
        &self.pooling
    }
    /// Whether embeddings are L2-normalised (a Normalize module in `modules.json`).
    pub fn normalizes(&self) -> bool {
        self.normalize
    }
    /// Tokens per text at most, special tokens included.
    pub fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }
    pub fn batch_size(&self) -> usize {
        self.options.batch_size
    }
    pub fn set_batch_size(&mut self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::Config("embed: batch size must be at least 1".into()));
        }
        self.options.batch_size = n;
        Ok(())
    }
    /// `(batch, seq)` shapes with a compiled graph in the cache.
    pub fn cached_shapes(&self) -> Vec<(usize, usize)> {
        let mut v: Vec<_> = self.graphs.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Tokenises `texts` as the embedding does (lower-casing if the model asks, trimmed,
    /// truncated to [`max_seq_length`](Self::max_seq_length), special tokens added).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        let prepared: Vec<String> = texts
            .iter()
            .map(|t| if self.do_lower_case { t.trim().to_lowercase() } else { t.trim().to_string() })
            .collect();
        let inputs: Vec<&str> = prepared.iter().map(String::as_str).collect();
        let encs = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| Error::invalid("Embedder", format!("tokenising: {e}")))?;
        Ok(encs
            .into_iter()
            .map(|e| Encoded { ids: e.get_ids().to_vec(), type_ids: e.get_type_ids().to_vec() })
            .collect())
    }

    /// The sentence embeddings of `texts`, in order.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_with_stats(texts)?.0)
    }

    /// [`embed`](Self::embed) with the time spent per batch.
    pub fn embed_with_stats(&mut self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, EmbedStats)> {
        let t0 = Instant::now();
        let encs = self.tokenize(texts)?;
        let mut stats = EmbedStats { tokenize: t0.elapsed(), batches: Vec::new() };
        let h = self.config.hidden_size;
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for batch in self.batches(&encs) {
            let (hidden, seq, mut bs) = self.forward(&encs, &batch)?;
            let t = Instant::now();
            for (row, &i) in batch.iter().enumerate() {
                let len = encs[i].ids.len();
                let mut v = self.pooling.pool(&hidden[row * seq * h..(row * seq + len) * h], len, h);
                if self.normalize {
                    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12);
                    v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
                }
                out[i] = v;
            }
            bs.run += t.elapsed();
            stats.batches.push(bs);
        }
        Ok((out, stats))
    }

    /// The last hidden state of every text (padding removed), in order.
    pub fn token_embeddings(&mut self, texts: &[&str]) -> Result<Vec<TokenEmbeddings>> {
        let encs = self.tokenize(texts)?;
        let h = self.config.hidden_size;
        let mut out: Vec<Option<TokenEmbeddings>> = vec![None; texts.len()];
        for batch in self.batches(&encs) {
            let (hidden, seq, _) = self.forward(&encs, &batch)?;
            for (row, &i) in batch.iter().enumerate() {
                let len = encs[i].ids.len();
                let values = hidden[row * seq * h..(row * seq + len) * h].to_vec();
                out[i] = Some(TokenEmbeddings { ids: encs[i].ids.clone(), hidden_size: h, values });
            }
        }
        out.into_iter()
            .map(|t| t.ok_or_else(|| Error::invalid("Embedder", "a text was left out of every batch")))
            .collect()
    }

    /// Indices of `encs` grouped into batches, longest texts first (less padding).
    fn batches(&self, encs: &[Encoded]) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..encs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encs[i].ids.len()));
        order.chunks(self.options.batch_size).map(|c| c.to_vec()).collect()
    }

    /// Runs the texts `batch` of `encs`, padded to the longest; returns the last hidden
    /// state `[batch.len(), seq, hidden]` flattened, and `seq`.
    fn forward(&mut self, encs: &[Encoded], batch: &[usize]) -> Result<(Vec<f32>, usize, BatchStats)> {
        let b = batch.len();
        let longest = batch.iter().map(|&i| encs[i].ids.len()).max().unwrap_or(0).max(1);
        let seq = longest
            .next_multiple_of(self.options.pad_to_multiple_of)
            .min(self.config.max_position_embeddings)
            .max(longest);
        let mut ids = vec![self.pad_id as i64; b * seq];
        let mut types = vec![0i64; b * seq];
        let mut mask = vec![0f32; b * seq];
        let mut tokens = 0;
        for (row, &i) in batch.iter().enumerate() {
            let e = &encs[i];
            tokens += e.ids.len();
            for (j, (&id, &ty)) in e.ids.iter().zip(&e.type_ids).enumerate() {
                ids[row * seq + j] = id as i64;
                types[row * seq + j] = ty as i64;
                mask[row * seq + j] = 1.0;
            }
        }
        let compile = self.ensure_graph(b, seq)?;
        let t = Instant::now();
        let dev = self.options.device;
        let inputs = [
            self.rt.from_slice(&ids, [b, seq], dev)?,
            self.rt.from_slice(&types, [b, seq], dev)?,
            self.rt.from_slice(&mask, [b, seq], dev)?,
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let cached = self
            .graphs
            .get(&(b, seq))
            .ok_or_else(|| Error::invalid("Embedder", format!("no compiled graph for batch {b} x seq {seq}")))?;
        let outs = cached.graph.run(&refs)?;
        let out = outs.first().ok_or_else(|| Error::invalid("Embedder", "the encoder returned no output"))?;
        let want = [b, seq, self.config.hidden_size];
        if out.dims() != want {
            return Err(Error::invalid("Embedder", format!("encoder output is {:?}, expected {want:?}", out.dims())));
        }
        let hidden: Vec<f32> = out.to_ndarray::<f32>()?.iter().copied().collect();
        Ok((hidden, seq, BatchStats { sentences: b, seq, tokens, compile, run: t.elapsed() }))
    }

    /// Compiles the graph for `(b, seq)` unless cached; returns the compile time if it
    /// compiled.
    fn ensure_graph(&mut self, b: usize, seq: usize) -> Result<Option<Duration>> {
        self.clock += 1;
        if let Some(g) = self.graphs.get_mut(&(b, seq)) {
            g.last_used = self.clock;
            return Ok(None);
        }
        let t = Instant::now();
        while self.graphs.len() >= self.options.max_cached_graphs && self.evict_oldest() {}
        let mut options = CompileOptions::from_config(self.rt.config(), self.options.device);
        // The weights are uploaded and packed by the first compile and shared by the others
        // (`constants`). Each compiled graph holds its arena and user streams (a device has
        // at most `max_streams`): when the device runs out, drop cached graphs, oldest first, then
        // fall back to a single-stream schedule. The graph is built afresh for each try and
        // handed over, so that its host weights are freed as they are uploaded.
        let graph = loop {
            let bg = bert::build(&self.config, Weights::File(self.weights.clone()), b, seq)?;
            match CompiledGraph::compile_shared(&self.rt, bg.graph, options.clone(), &self.constants) {
                Ok(g) => break g,
                Err(e @ (Error::Device { .. } | Error::OutOfMemory { .. })) => {
                    if self.evict_oldest() {
                        log::debug!("embedder: {e}; dropped the least recently used graph");
                    } else if options.parallel {
                        log::warn!("embedder: {e}; compiling batch {b} x seq {seq} on one stream");
                        options.parallel = false;
                    } else {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        };
        log::debug!("embedder: compiled batch {b} x seq {seq} in {:?}", t.elapsed());
        self.graphs.insert((b, seq), CachedGraph { graph, last_used: self.clock });
        Ok(Some(t.elapsed()))
    }

    /// Drops the least recently used compiled graph; false when the cache is empty.
    fn evict_oldest(&mut self) -> bool {
        let oldest = self.graphs.iter().min_by_key(|(_, g)| g.last_used).map(|(k, _)| *k);
        oldest.is_some_and(|k| self.graphs.remove(&k).is_some())
    }
}
