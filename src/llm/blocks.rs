//! The paged KV cache's bookkeeping: a pool of `num_blocks` blocks of `block_size` token
//! slots, handed to sequences as they grow and taken back when they finish.
//!
//! A token at position `p` of a sequence lives at slot `table[p / block_size] *
//! block_size + p % block_size` of the caches `[num_blocks, block_size, kv_heads,
//! head_dim]`. The manager gives the graphs what they read: the slots of new tokens
//! (`KvCacheWrite`), a sequence's block table and its length (`PagedAttention`).

use std::collections::HashMap;

/// A sequence's id in the manager.
pub type SeqId = u64;

/// Why the manager refused. `Send + Sync`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    #[error("kv cache: {needed} more block(s) needed, {free} free of {total}")]
    OutOfBlocks { needed: usize, free: usize, total: usize },
    #[error("kv cache: no sequence {0}")]
    Unknown(SeqId),
    #[error("kv cache: sequence {0} already exists")]
    Exists(SeqId),
    #[error("kv cache: block size and block count must be at least 1 and fit i32 slots ({blocks} x {block_size})")]
    Config { blocks: usize, block_size: usize },
    #[error("kv cache: sequence {seq} has {blocks} blocks, more than the table width {width}")]
    TableWidth { seq: SeqId, blocks: usize, width: usize },
}

impl From<BlockError> for runtime::Error {
    fn from(e: BlockError) -> runtime::Error {
        match e {
            BlockError::OutOfBlocks { .. } => runtime::Error::Config(e.to_string()),
            e => runtime::Error::invalid("KvCache", e.to_string()),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Blocks {
    ids: Vec<u32>,
    len: usize,
}

/// The block pool and every live sequence's blocks. `Send + Sync`, plain data; used
/// through `&mut self`.
#[derive(Clone, Debug)]
pub struct BlockManager {
    block_size: usize,
    num_blocks: usize,
    /// Free block ids, the next one handed out last.
    free: Vec<u32>,
    seqs: HashMap<SeqId, Blocks>,
}

impl BlockManager {
    /// A pool of `num_blocks` blocks of `block_size` slots (both at least 1, and every
    /// slot id an `i32`).
    pub fn new(num_blocks: usize, block_size: usize) -> Result<BlockManager, BlockError> {
        let slots = num_blocks.checked_mul(block_size).filter(|&s| s <= i32::MAX as usize);
        if num_blocks == 0 || block_size == 0 || slots.is_none() {
            return Err(BlockError::Config { blocks: num_blocks, block_size });
        }
        let free = (0..num_blocks as u32).rev().collect();
        Ok(BlockManager { block_size, num_blocks, free, seqs: HashMap::new() })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks that hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Registers sequence `seq`, empty.
    pub fn add(&mut self, seq: SeqId) -> Result<(), BlockError> {
        if self.seqs.contains_key(&seq) {
            return Err(BlockError::Exists(seq));
        }
        self.seqs.insert(seq, Blocks::default());
        Ok(())
    }

    fn get(&self, seq: SeqId) -> Result<&Blocks, BlockError> {
        self.seqs.get(&seq).ok_or(BlockError::Unknown(seq))
    }

    /// Tokens sequence `seq` holds.
    pub fn len(&self, seq: SeqId) -> Result<usize, BlockError> {
        Ok(self.get(seq)?.len)
    }

    /// Whether `seq` can grow by `n` tokens with the blocks free now.
    pub fn can_append(&self, seq: SeqId, n: usize) -> Result<bool, BlockError> {
        Ok(self.needed(self.get(seq)?, n).is_some_and(|b| b <= self.free.len()))
    }

    /// More blocks `b` needs to grow by `n` tokens (`None` on overflow).
    fn needed(&self, b: &Blocks, n: usize) -> Option<usize> {
        Some(self.blocks_for(b.len.checked_add(n)?).saturating_sub(b.ids.len()))
    }

    /// Grows `seq` by `n` tokens, taking the blocks it needs (all or none), and returns
    /// the slots of the new positions.
    pub fn append(&mut self, seq: SeqId, n: usize) -> Result<Vec<i32>, BlockError> {
        let b = self.get(seq)?;
        let (total, free) = (self.num_blocks, self.free.len());
        let needed = self.needed(b, n).ok_or(BlockError::OutOfBlocks { needed: usize::MAX, free, total })?;
        if needed > free {
            return Err(BlockError::OutOfBlocks { needed, free, total });
        }
        let new = self.free.split_off(free - needed);
        let bs = self.block_size;
        let b = self.seqs.get_mut(&seq).ok_or(BlockError::Unknown(seq))?;
        b.ids.extend(new.into_iter().rev());
        let start = b.len;
        b.len += n;
        Ok((start..b.len).map(|p| (b.ids[p / bs] as usize * bs + p % bs) as i32).collect())
    }

    /// `seq`'s block table padded with 0 to `width` entries (the padding is never read:
    /// the sequence's length bounds what attention reads).
    pub fn block_table(&self, seq: SeqId, width: usize) -> Result<Vec<i32>, BlockError> {
        let b = self.get(seq)?;
        if b.ids.len() > width {
            return Err(BlockError::TableWidth { seq, blocks: b.ids.len(), width });
        }
        let mut t: Vec<i32> = b.ids.iter().map(|&i| i as i32).collect();
        t.resize(width, 0);
        Ok(t)
    }

    /// Ends `seq`, handing its blocks back to the pool.
    pub fn free(&mut self, seq: SeqId) -> Result<(), BlockError> {
        let b = self.seqs.remove(&seq).ok_or(BlockError::Unknown(seq))?;
        self.free.extend(b.ids.into_iter().rev());
        Ok(())
    }

    /// Live sequences.
    pub fn sequences(&self) -> usize {
        self.seqs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_block_table() {
        let mut m = BlockManager::new(8, 4).unwrap();
        m.add(1).unwrap();
        m.add(2).unwrap();
        let a = m.append(1, 6).unwrap();
        let b = m.append(2, 3).unwrap();
        let a2 = m.append(1, 3).unwrap();
        assert_eq!(m.len(1).unwrap(), 9);
        assert_eq!(m.free_blocks(), 8 - 3 - 1);
        let t1 = m.block_table(1, 4).unwrap();
        let all: Vec<i32> = a.iter().chain(&a2).copied().collect();
        for (p, &slot) in all.iter().enumerate() {
            assert_eq!(slot, t1[p / 4] * 4 + (p % 4) as i32, "position {p}");
        }
        assert_eq!(t1[3], 0, "padding");
        // No slot is shared between sequences.
        assert!(b.iter().all(|s| !all.contains(s)));
        assert!(matches!(m.block_table(1, 2), Err(BlockError::TableWidth { blocks: 3, width: 2, .. })));
    }

    #[test]
    fn the_pool_refuses_when_out_of_blocks_and_refills_on_free() {
        let mut m = BlockManager::new(3, 16).unwrap();
        m.add(7).unwrap();
        m.append(7, 33).unwrap();
        assert_eq!(m.free_blocks(), 0);
        m.add(8).unwrap();
        assert!(!m.can_append(8, 1).unwrap());
        assert_eq!(m.append(8, 1), Err(BlockError::OutOfBlocks { needed: 1, free: 0, total: 3 }));
        // The refusal changed nothing; growing inside the last block needs no block.
        assert_eq!(m.len(8).unwrap(), 0);
        assert!(m.can_append(7, 15).unwrap());
        m.append(7, 15).unwrap();
        assert_eq!(m.append(7, 1), Err(BlockError::OutOfBlocks { needed: 1, free: 0, total: 3 }));
        m.free(7).unwrap();
        assert_eq!(m.free_blocks(), 3);
        assert_eq!(m.append(8, 48).unwrap().len(), 48);
        assert_eq!(m.free(7), Err(BlockError::Unknown(7)));
        assert_eq!(m.add(8), Err(BlockError::Exists(8)));
        assert_eq!(
            m.append(8, usize::MAX).unwrap_err(),
            BlockError::OutOfBlocks { needed: usize::MAX, free: 0, total: 3 }
        );
    }

    #[test]
    fn bad_pools_are_refused() {
        assert!(BlockManager::new(0, 16).is_err());
        assert!(BlockManager::new(16, 0).is_err());
        assert!(BlockManager::new(1 << 30, 16).is_err());
    }
}
