//! The component's allocator: a bump allocator over a static arena.
//!
//! The host gives every call a fresh instance, so nothing allocated needs to
//! outlive the call and freeing is wasted work: wasi-libc's dlmalloc spent
//! about 12 % of an evaluation's instructions on bookkeeping for blocks that
//! were about to disappear with the instance anyway. Here an allocation is a pointer bump,
//! `dealloc` gives back only the most recent block (which is what the
//! canonical ABI's temporary lists and a growing `Vec` do), and `realloc` of
//! the most recent block grows it in place.
//!
//! The arena lives in `.bss`, inside the module's initial memory, so an
//! evaluation never calls `memory.grow`: growing costs the host an `mprotect`
//! now and another when the slot is reset. Only when the arena runs out
//! (an observation far larger than a real cluster's) does the allocator take
//! fresh pages with `memory.grow`, so the memory cap stays the only limit.

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::cell::UnsafeCell;
use core::ptr;

/// An evaluation of the five-member benchmark observation allocates about
/// 5 KiB, so this holds a cluster many times that size. Stack, data and arena
/// together stay within the window the host keeps resident between
/// instances (host/src/policy/engine.rs).
const ARENA_BYTES: usize = 64 << 10;

const PAGE_BYTES: usize = 64 << 10;

#[global_allocator]
static ALLOCATOR: Bump = Bump {
    arena: UnsafeCell::new(Arena([0; ARENA_BYTES])),
    cursor: UnsafeCell::new(Cursor { next: 0, end: 0 }),
};

#[repr(C, align(16))]
struct Arena([u8; ARENA_BYTES]);

/// The free space: `next..end`. Both 0 until the first allocation.
struct Cursor {
    next: usize,
    end: usize,
}

struct Bump {
    arena: UnsafeCell<Arena>,
    cursor: UnsafeCell<Cursor>,
}

// SAFETY: the component is built without the wasm threads feature; it runs on
// exactly one thread, so the cells are never accessed concurrently.
unsafe impl Sync for Bump {}

impl Bump {
    #[allow(clippy::mut_from_ref, reason = "single-threaded; see the Sync impl")]
    fn cursor(&self) -> &mut Cursor {
        // SAFETY: single-threaded, and no caller holds the reference across
        // another call into the allocator.
        let cursor = unsafe { &mut *self.cursor.get() };
        if cursor.end == 0 {
            cursor.next = self.arena.get() as usize;
            cursor.end = cursor.next + ARENA_BYTES;
        }
        cursor
    }
}

impl Cursor {
    fn take(&mut self, layout: Layout) -> *mut u8 {
        let Some(start) = self
            .fit(layout)
            .or_else(|| self.grow(layout).and_then(|()| self.fit(layout)))
        else {
            return ptr::null_mut();
        };
        self.next = start + layout.size();
        start as *mut u8
    }

    /// Continues in fresh pages that hold `layout`. The rest of the current
    /// region is abandoned (and with it whatever `dealloc` would have given
    /// back), which is fine for a call that ends soon.
    fn grow(&mut self, layout: Layout) -> Option<()> {
        let bytes = layout
            .size()
            .checked_add(layout.align())?
            .checked_next_multiple_of(PAGE_BYTES)?;
        let previous = wasm32::memory_grow(0, bytes / PAGE_BYTES);
        if previous == usize::MAX {
            return None;
        }
        self.next = previous.checked_mul(PAGE_BYTES)?;
        self.end = self.next.checked_add(bytes)?;
        Some(())
    }

    fn fit(&self, layout: Layout) -> Option<usize> {
        let start = self.next.checked_next_multiple_of(layout.align())?;
        (start.checked_add(layout.size())? <= self.end).then_some(start)
    }

    fn is_last(&self, block: *mut u8, size: usize) -> bool {
        block as usize + size == self.next
    }
}

// SAFETY: blocks never overlap: `next` only moves back over the block that
// was handed out last, when that block is freed or resized in place.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.cursor().take(layout)
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let cursor = self.cursor();
        if cursor.is_last(block, layout.size()) {
            cursor.next = block as usize;
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let cursor = self.cursor();
        if cursor.is_last(block, layout.size()) && block as usize + new_size <= cursor.end {
            cursor.next = block as usize + new_size;
            return block;
        }
        if new_size <= layout.size() {
            return block;
        }
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        let moved = cursor.take(new_layout);
        if !moved.is_null() {
            // SAFETY: `moved` is a fresh block, so it does not overlap `block`,
            // and it is larger than `block`.
            unsafe { ptr::copy_nonoverlapping(block, moved, layout.size()) };
        }
        moved
    }
}
