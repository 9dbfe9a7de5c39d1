//! Prompts to token ids exactly as the model directory's `tokenizer.json` says (its
//! post-processor decides BOS; npurt adds nothing of its own, as `transformers`'
//! `tokenizer(prompt)`), and generated ids back to text, streamed at UTF-8 boundaries.

use runtime::{Error, Result};
use std::path::Path;
use tokenizers::Tokenizer;

/// A decoder's tokenizer: no truncation, no padding. `Send + Sync`.
#[derive(Clone)]
pub struct LlmTokenizer {
    inner: Tokenizer,
}

impl std::fmt::Debug for LlmTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmTokenizer").field("vocab", &self.inner.get_vocab_size(true)).finish()
    }
}

impl LlmTokenizer {
    /// Parses a `tokenizer.json`; `origin` labels errors. Every id it can produce must be
    /// below `vocab_size` (the embedding table's rows).
    pub fn from_json(text: &str, origin: &str, vocab_size: usize) -> Result<LlmTokenizer> {
        let mut inner = Tokenizer::from_bytes(text).map_err(|e| Error::format(format!("{origin}: {e}")))?;
        if let Some((token, id)) =
            inner.get_vocab(true).into_iter().filter(|(_, id)| *id as usize >= vocab_size).min_by_key(|t| t.1)
        {
            return Err(Error::format(format!(
                "{origin}: token {token:?} has id {id}, past config.json vocab_size {vocab_size}"
            )));
        }
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| Error::Config(format!("{origin}: truncation: {e}")))?;
        Ok(LlmTokenizer { inner })
    }

    /// Reads `path` (a regular JSON file within the size limit).
    pub fn from_file(path: impl AsRef<Path>, vocab_size: usize) -> Result<LlmTokenizer> {
        let p = path.as_ref();
        let text = crate::files::read_json_text(p)?;
        Self::from_json(&text, &p.display().to_string(), vocab_size)
    }

    /// The ids of `text` with the special tokens the file's post-processor adds.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let e = self.inner.encode(text, true).map_err(|e| Error::invalid("Tokenizer", format!("encoding: {e}")))?;
        Ok(e.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| Error::invalid("Tokenizer", format!("decoding: {e}")))
    }

    /// The id of `token`, if the vocabulary has it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// Turns generated ids into text pieces as they come. A token may end inside a UTF-8
/// character (byte-level and byte-fallback vocabularies) and a decoder may change how the
/// previous token reads (leading spaces): each piece is the text of the ids so far, less
/// the text already given, emitted only when it does not end in an incomplete character.
/// The pieces concatenate to [`LlmTokenizer::decode`] of all ids (the last one given by
/// [`finish`](Self::finish)). `Send + Sync`, plain data.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the window decoded for context.
    prefix: usize,
    /// End of the ids whose text was given.
    read: usize,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds `id`; returns the new text, or `None` while it ends inside a character.
    pub fn push(&mut self, tok: &LlmTokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') {
            let piece = match now.get(before.len()..) {
                Some(p) if now.starts_with(&before) => p.to_string(),
                // The decoder rewrote the window: give what follows the common prefix.
                _ => now.chars().skip(before.chars().count()).collect(),
            };
            self.prefix = self.read;
            self.read = self.ids.len();
            return Ok(Some(piece));
        }
        Ok(None)
    }

    /// The text still held back (a trailing incomplete character, as the decoder renders it).
    pub fn finish(&mut self, tok: &LlmTokenizer) -> Result<String> {
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now.get(before.len()..).unwrap_or_default().to_string())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A byte-fallback vocabulary: `a`, `b`, a space marker and the three bytes of "€".
    pub(crate) const BYTES_TOKENIZER: &str = r#"{
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 6, "content": "<s>", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"String": ""}, "behavior": "Isolated", "invert": false},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [6], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "WordLevel", "unk_token": "<unk>",
            "vocab": {"a": 0, "b": 1, " ": 2, "<0xE2>": 3, "<0x82>": 4, "<0xAC>": 5, "<s>": 6, "<unk>": 7}}
    }"#;

    fn tok() -> LlmTokenizer {
        LlmTokenizer::from_json(BYTES_TOKENIZER, "test", 8).unwrap()
    }

    #[test]
    fn encoding_adds_what_the_post_processor_says() {
        assert_eq!(tok().encode("ab a").unwrap(), vec![6, 0, 1, 2, 0]);
        assert_eq!(tok().decode(&[6, 0, 3, 4, 5]).unwrap(), "a€");
        let e = LlmTokenizer::from_json(BYTES_TOKENIZER, "t.json", 7).unwrap_err();
        assert!(e.to_string().contains("past config.json vocab_size 7"), "{e}");
    }

    #[test]
    fn streaming_waits_for_whole_characters() {
        let t = tok();
        let mut s = StreamDecoder::new();
        let pieces: Vec<Option<String>> = [0, 3, 4, 5, 2, 1, 6].iter().map(|&id| s.push(&t, id).unwrap()).collect();
        let want = [Some("a"), None, None, Some("€"), Some(" "), Some("b"), None];
        assert_eq!(pieces, want.map(|p| p.map(String::from)));
        assert_eq!(s.finish(&t).unwrap(), "");
        // A character cut by the end comes out of finish.
        let mut s = StreamDecoder::new();
        assert_eq!(s.push(&t, 3).unwrap(), None);
        assert_eq!(s.finish(&t).unwrap(), t.decode(&[3]).unwrap());
    }
}
