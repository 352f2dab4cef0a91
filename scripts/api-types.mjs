// The frontend's REST types, generated from docs/openapi.yaml: `generate` writes
// src/api.generated.ts; `check` fails when that file is not what the YAML gives now.
// Usage: node scripts/api-types.mjs generate|check   (jlpm run api:generate / api:check)
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import * as prettier from 'prettier';

const root = resolve(fileURLToPath(import.meta.url), '..', '..');
const spec = process.env.GPUWS_OPENAPI ?? resolve(root, 'docs', 'openapi.yaml');
const target = resolve(root, 'src', 'api.generated.ts');

const HEADER = `// Generated from docs/openapi.yaml by \`jlpm run api:generate\`: do not edit.
// Change the YAML (the API's one description) and generate again; \`jlpm run api:check\`
// (scripts/test.sh) fails while this file is out of date.
`;

async function generated() {
  // The tuples of the YAML's fixed-length arrays ([step, value]) become TypeScript tuples.
  const ast = await openapiTS(pathToFileURL(spec), { arrayLength: true, defaultNonNullable: false });
  const text = HEADER + astToString(ast);
  const options = (await prettier.resolveConfig(target)) ?? {};
  return prettier.format(text, { ...options, filepath: target });
}

const mode = process.argv[2];
if (mode === 'generate') {
  await writeFile(target, await generated());
} else if (mode === 'check') {
  const committed = await readFile(target, 'utf8').catch(() => '');
  if (committed !== (await generated())) {
    console.error(
      'src/api.generated.ts is out of date with docs/openapi.yaml: run `jlpm run api:generate` and commit it'
    );
    process.exit(1);
  }
} else {
  console.error('Usage: node scripts/api-types.mjs generate|check');
  process.exit(2);
}
