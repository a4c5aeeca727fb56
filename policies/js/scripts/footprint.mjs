#!/usr/bin/env node
// Prints what a component asks of wasmtime's pooling allocator: core module
// instantiations, the memories and tables those modules define (with their
// initial/maximum sizes) and the component's imports. Reads the binary
// directly so it needs nothing beyond Node.
//
//   node scripts/footprint.mjs policy.wasm [--json]
import { readFileSync } from 'node:fs';

const bytes = readFileSync(process.argv[2]);
const asJson = process.argv.includes('--json');

function reader(buf, pos, end) {
  const r = {
    pos, end,
    byte() { return buf[r.pos++]; },
    u32() { let result = 0n, shift = 0n, b; do { b = buf[r.pos++]; result |= BigInt(b & 0x7f) << shift; shift += 7n; } while (b & 0x80); return Number(result); },
    u64() { let result = 0n, shift = 0n, b; do { b = buf[r.pos++]; result |= BigInt(b & 0x7f) << shift; shift += 7n; } while (b & 0x80); return result; },
    name() { const n = r.u32(); const s = buf.subarray(r.pos, r.pos + n).toString('utf8'); r.pos += n; return s; },
    // Core limits: flag bit 0 = has max, bit 2 = 64-bit, bit 3 = custom page size.
    limits() {
      const flags = r.byte();
      const min = r.u64();
      const max = flags & 1 ? r.u64() : null;
      const pageLog2 = flags & 8 ? r.u32() : 16;
      return { min, max, pageLog2, shared: !!(flags & 2), is64: !!(flags & 4) };
    },
    reftype() { const t = r.byte(); if (t === 0x63 || t === 0x64) r.u32(); return t; },
  };
  return r;
}

const modules = [];   // every core module, in binary order
const summary = { coreInstantiations: 0, componentInstantiations: 0, imports: [] };

function parseCoreModule(start, end) {
  const m = { size: end - start, memories: [], tables: [], importedMemories: 0, importedTables: 0, imports: [] };
  const r = reader(bytes, start + 8, end);
  while (r.pos < end) {
    const id = r.byte(); const len = r.u32(); const sEnd = r.pos + len;
    if (id === 2) {
      for (let n = r.u32(); n > 0; n--) {
        const mod = r.name(), field = r.name(), kind = r.byte();
        m.imports.push(`${mod}#${field}`);
        if (kind === 0x00) r.u32();
        else if (kind === 0x01) { r.reftype(); r.limits(); m.importedTables++; }
        else if (kind === 0x02) { r.limits(); m.importedMemories++; }
        else if (kind === 0x03) { r.byte(); r.byte(); }
        else if (kind === 0x04) { r.byte(); r.u32(); }
      }
    } else if (id === 4) {
      for (let n = r.u32(); n > 0; n--) {
        let t = r.byte();
        if (t === 0x40) { r.byte(); t = r.reftype(); } else if (t === 0x63 || t === 0x64) r.u32();
        const l = r.limits();
        m.tables.push({ min: Number(l.min), max: l.max === null ? null : Number(l.max) });
        // an init expression follows only in the 0x40 form; we stop here as tables are last we need
      }
    } else if (id === 5) {
      for (let n = r.u32(); n > 0; n--) {
        const l = r.limits();
        const page = 2 ** l.pageLog2;
        m.memories.push({ minPages: Number(l.min), maxPages: l.max === null ? null : Number(l.max), minBytes: Number(l.min) * page });
      }
    }
    r.pos = sEnd;
  }
  return m;
}

function parseComponent(start, end, depth) {
  const r = reader(bytes, start + 8, end);
  while (r.pos < end) {
    const id = r.byte(); const len = r.u32(); const sEnd = r.pos + len;
    if (id === 1) modules.push(parseCoreModule(r.pos, sEnd));
    else if (id === 4) parseComponent(r.pos, sEnd, depth + 1);
    else if (id === 2) {
      for (let n = r.u32(); n > 0; n--) {
        const tag = r.byte();
        if (tag === 0x00) { r.u32(); for (let a = r.u32(); a > 0; a--) { r.name(); r.byte(); r.u32(); } summary.coreInstantiations++; }
        else { for (let a = r.u32(); a > 0; a--) { r.name(); r.byte(); r.u32(); } }
      }
    } else if (id === 5) {
      for (let n = r.u32(); n > 0; n--) {
        const tag = r.byte();
        if (tag === 0x00) { r.u32(); for (let a = r.u32(); a > 0; a--) { r.name(); const sort = r.byte(); if (sort === 0x00) r.byte(); r.u32(); } summary.componentInstantiations++; }
        else { for (let a = r.u32(); a > 0; a--) { r.name(); const sort = r.byte(); if (sort === 0x00) r.byte(); r.u32(); } }
      }
    } else if (id === 10 && depth === 0) {
      for (let n = r.u32(); n > 0; n--) {
        const nameTag = r.byte(); const name = r.name(); if (nameTag === 0x01) r.name();
        summary.imports.push(name);
        const kind = r.byte(); // externdesc: skip it
        if (kind === 0x00) { r.byte(); r.u32(); }
        else if (kind === 0x02) { if (r.byte() === 0x00) r.u32(); }
        else if (kind === 0x03) { if (r.byte() === 0x00) r.u32(); }
        else r.u32();
      }
    }
    r.pos = sEnd;
  }
}

if (bytes.readUInt32LE(4) !== 0x0001000d) throw new Error('not a component');
parseComponent(0, bytes.length, 0);

// Note: each module is instantiated at most once by componentize-js/wit-component
// output, so defined memories/tables per module add up to the per-instance totals.
const memories = modules.flatMap((m) => m.memories);
const tables = modules.flatMap((m) => m.tables);
const largest = tables.reduce((a, t) => (a && a.min >= t.min ? a : t), null);
const out = {
  componentBytes: bytes.length,
  coreModules: modules.length,
  coreInstantiations: summary.coreInstantiations,
  componentInstantiations: summary.componentInstantiations,
  memories: memories.length,
  memorySizes: memories,
  tables: tables.length,
  tableSizes: tables,
  largestTable: largest,
  modules: modules.map((m) => ({ bytes: m.size, memories: m.memories.length, tables: m.tables.length, importedMemories: m.importedMemories, importedTables: m.importedTables, imports: m.imports.length })),
  componentImports: summary.imports,
};
console.log(asJson ? JSON.stringify(out) : JSON.stringify(out, null, 2));
