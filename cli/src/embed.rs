//! `npurt embed`: sentence embeddings from a sentence-transformers model directory.
//!
//! Texts come from the arguments, or one per line on standard input; each becomes one
//! JSON line `{"text": ..., "embedding": [...]}` on standard output, in input order.
//! `--stats` prints the latency of every batch and the throughput to standard error.

use super::values::positive;
use clap::Args;
use npurt::embed::{BatchStats, EmbedOptions, Embedder};
use npurt::{Error, Result, Runtime, RuntimeConfig};
use std::io::{BufRead, Write};
use std::time::Duration;

/// `npurt embed --model-dir DIR [--batch N] [--pad-multiple M] [--stats] [TEXT ...]`
#[derive(Args)]
pub struct EmbedArgs {
    /// A sentence-transformers model directory (config.json, model.safetensors,
    /// tokenizer.json, modules.json, 1_Pooling/config.json, sentence_bert_config.json),
    /// e.g. target/test-assets/all-MiniLM-L6-v2
    #[arg(long, value_name = "DIR", value_parser = crate::outputs::input_path)]
    model_dir: String,
    /// Texts per forward pass
    #[arg(long, value_name = "N", default_value = "32", value_parser = positive, allow_negative_numbers = true)]
    batch: usize,
    /// Pad each batch to its longest text rounded up to a multiple of M (1: the longest);
    /// fewer distinct shapes, so fewer compiles
    #[arg(long, value_name = "M", default_value = "1", value_parser = positive, allow_negative_numbers = true)]
    pad_multiple: usize,
    /// Latency per batch and sentences/s on standard error
    #[arg(long)]
    stats: bool,
    /// Texts to embed; without any, one text per line of standard input (`--` ends the
    /// options: later arguments are texts)
    #[arg(value_name = "TEXT")]
    texts: Vec<String>,
}

/// Texts read from standard input are embedded this many batches (at least
/// `STDIN_CHUNK_MIN` texts) at a time, so output starts before the input ends and memory
/// stays bounded; within a chunk texts are sorted by length, so batches pad little.
const STDIN_CHUNK_BATCHES: usize = 16;
const STDIN_CHUNK_MIN: usize = 512;

/// Running totals for `--stats`.
#[derive(Default)]
struct Totals {
    sentences: usize,
    batches: usize,
    tokenize: Duration,
    compile: Duration,
    compiles: usize,
    /// The first compile (it uploads and packs the weights; later shapes share them).
    first_compile: Option<Duration>,
    run: Duration,
    latencies: Vec<Duration>,
}

impl Totals {
    fn add_batch(&mut self, b: &BatchStats) {
        self.batches += 1;
        self.sentences += b.sentences;
        self.run += b.run;
        if let Some(c) = b.compile {
            self.compile += c;
            self.compiles += 1;
            self.first_compile.get_or_insert(c);
        }
        self.latencies.push(b.run);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let compile = b.compile.map_or(String::new(), |c| format!(" (+ compile {:.1} ms)", ms(c)));
        eprintln!(
            "batch {:>4}: {:>4} sentences, seq {:>3}, {:>6} tokens: {:>9.2} ms, {:>8.1} sentences/s{compile}",
            self.batches,
            b.sentences,
            b.seq,
            b.tokens,
            ms(b.run),
            b.sentences as f64 / b.run.as_secs_f64().max(1e-9)
        );
    }

    fn summary(&mut self, wall: Duration) {
        if self.batches == 0 {
            eprintln!("stats: no text");
            return;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        self.latencies.sort_unstable();
        let pick = |q: f64| self.latencies[((self.latencies.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "stats: {} sentences in {} batches; batch latency mean {:.2} ms, p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
            self.sentences,
            self.batches,
            ms(self.run) / self.batches as f64,
            ms(pick(0.5)),
            ms(pick(0.9)),
            ms(pick(1.0)),
        );
        eprintln!(
            "stats: throughput {:.1} sentences/s (forward passes only), {:.1} sentences/s overall \
             (wall {:.1} ms: tokenise {:.1} ms, {} compile(s) {:.1} ms, batches {:.1} ms)",
            self.sentences as f64 / self.run.as_secs_f64().max(1e-9),
            self.sentences as f64 / wall.as_secs_f64().max(1e-9),
            ms(wall),
            ms(self.tokenize),
            self.compiles,
            ms(self.compile),
            ms(self.run),
        );
        if let Some(first) = self.first_compile.filter(|_| self.compiles > 1) {
            eprintln!(
                "stats: compiles: the first {:.1} ms (weights uploaded and packed), the {} others {:.1} ms each on average (weights shared)",
                ms(first),
                self.compiles - 1,
                ms(self.compile - first) / (self.compiles - 1) as f64,
            );
        }
    }
}

fn emit(out: &mut impl Write, texts: &[String], embeddings: &[Vec<f32>]) -> Result<()> {
    for (t, e) in texts.iter().zip(embeddings) {
        // JSON has no NaN or infinity (serde_json would print `null`).
        if let Some(x) = e.iter().find(|x| !x.is_finite()) {
            return Err(Error::invalid("embed", format!("the embedding of {t:?} holds {x}: the encoder overflowed")));
        }
        let text = serde_json::to_string(t).map_err(|e| Error::format_from("JSON", e))?;
        let emb = serde_json::to_string(e).map_err(|e| Error::format_from("JSON", e))?;
        writeln!(out, "{{\"text\":{text},\"embedding\":{emb}}}")?;
    }
    out.flush()?;
    Ok(())
}

fn embed_chunk(
    e: &mut Embedder,
    texts: &[String],
    totals: &mut Totals,
    stats: bool,
    out: &mut impl Write,
) -> Result<()> {
    if texts.is_empty() {
        return Ok(());
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (embeddings, s) = e.embed_with_stats(&refs)?;
    if stats {
        totals.tokenize += s.tokenize;
        for b in &s.batches {
            totals.add_batch(b);
        }
    }
    emit(out, texts, &embeddings)
}

pub fn run(config: RuntimeConfig, args: EmbedArgs) -> Result<()> {
    let rt = Runtime::with_config(config)?;
    let started = std::time::Instant::now();
    let mut e = Embedder::from_dir_with(
        &rt,
        &args.model_dir,
        EmbedOptions { batch_size: args.batch, pad_to_multiple_of: args.pad_multiple, ..EmbedOptions::default() },
    )?;
    if args.stats {
        eprintln!(
            "embed: {} on {} ({} layers, hidden {}, max_seq_length {}, batch {}), loaded in {:.1} ms",
            args.model_dir,
            rt.backend_name(),
            e.config().num_hidden_layers,
            e.config().hidden_size,
            e.max_seq_length(),
            args.batch,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut totals = Totals::default();
    let t0 = std::time::Instant::now();
    if !args.texts.is_empty() {
        embed_chunk(&mut e, &args.texts, &mut totals, args.stats, &mut out)?;
    } else {
        let chunk = args.batch.saturating_mul(STDIN_CHUNK_BATCHES).max(STDIN_CHUNK_MIN);
        let mut pending = Vec::with_capacity(chunk.min(4096));
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| Error::io("standard input", e))?;
            pending.push(line.strip_suffix('\r').map(str::to_string).unwrap_or(line));
            if pending.len() >= chunk {
                embed_chunk(&mut e, &pending, &mut totals, args.stats, &mut out)?;
                pending.clear();
            }
        }
        embed_chunk(&mut e, &pending, &mut totals, args.stats, &mut out)?;
    }
    if args.stats {
        totals.summary(t0.elapsed());
    }
    Ok(())
}
