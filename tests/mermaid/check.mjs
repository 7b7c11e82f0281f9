// Parses Mermaid diagrams with the real Mermaid parser, headless (jsdom supplies the DOM).
import { JSDOM } from 'jsdom';
import { readFileSync } from 'node:fs';
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const mermaid = (await import('mermaid')).default;
mermaid.initialize({ startOnLoad: false });
let failed = 0;
for (const file of process.argv.slice(2)) {
  const text = readFileSync(file, 'utf8');
  try {
    const r = await mermaid.parse(text);
    console.log(`ok ${file} (${r.diagramType})`);
  } catch (e) {
    failed++;
    console.log(`FAILED ${file}: ${String(e.message || e).split('\n').slice(0, 3).join(' | ')}`);
  }
}
process.exit(failed ? 1 : 0);
