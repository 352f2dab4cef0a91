/**
 * Each way a store fails, caused for real through a proxy in front of SeaweedFS
 * (tests/faultstore.py, tests/faultproxy.py): the Sync section reads one line naming the cause
 * and the fix within 5 s of the store being asked, none of the store library's own text shows,
 * and the fault heals by itself once the store behaves. Then the Jupyter server is stopped:
 * the panel says it is not answering, greys its sections and holds its figures still (issue 46).
 * The store and the server (port 8895, GPUWS_UI_TEST_FAULTS in jupyter_server_test_config.py)
 * are this spec's own: it starts them and stops them.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { openPanel, PANEL } from './panel';

const PORT = 8895;
const URL = `http://localhost:${PORT}`;
const ROOT = path.join(os.tmpdir(), 'gpuws-ui-faults-root');
const READY = path.join(os.tmpdir(), 'gpuws-ui-faults-ready.json');
const STORE_FOLDER = path.join(os.tmpdir(), 'gpuws-ui-faults-s3');
const STORE_LOG = path.join(os.tmpdir(), 'gpuws-ui-faults-store.log');
const SERVER_LOG = path.join(os.tmpdir(), 'gpuws-ui-faults-server.log');
// What only the store library says (obstore, reqwest, the store's XML): never in the panel.
const RAW = ['Generic', '<?xml', '%2F', 'Error performing', 'reqwest'];

interface IReady {
  control: string;
  store: string;
  env: Record<string, string>;
}

interface IFault {
  mode: string;
  /** What makes the store be asked: a file written (a pass), or the lease's own renewal. */
  cause: 'file' | 'lease';
  /** The line's words: its cause, then its fix. */
  words: string[];
  /** Words the line must not say. */
  never?: string[];
}

const FAULTS: IFault[] = [
  {
    mode: 'stall',
    cause: 'file',
    words: ['is not answering', 'goes on by itself once it answers']
  },
  {
    mode: 'reset',
    cause: 'file',
    words: ['broke before it answered', 'retries by itself']
  },
  { mode: '503', cause: 'file', words: ['answers 503', 'retries by itself'] },
  {
    // Our own renewal refused: the store (or a proxy) mishandles If-Match, nobody took the lease.
    mode: '412',
    cause: 'lease',
    words: ["refused this runtime's own conditional write", '412', 'retrying'],
    never: ['Another runtime', 'read-only']
  },
  {
    mode: 'untrusted-ca',
    cause: 'file',
    words: ['signed by a CA this machine does not trust', 'AWS_CA_BUNDLE']
  },
  {
    mode: 'self-signed-ca',
    cause: 'file',
    words: ["a CA certificate used as the server's own", 'CA:FALSE']
  },
  {
    mode: 'bucket-missing',
    cause: 'file',
    words: ['The bucket gpuws-faults does not exist', 'create it']
  },
  {
    mode: 'credentials',
    cause: 'file',
    words: ['refused the credentials', 'AWS_SECRET_ACCESS_KEY']
  }
];

let store: ChildProcess | null = null;
let server: ChildProcess | null = null;
let ready: IReady;

/** A GET on loopback: its status and body; status 0 where nothing answered. */
function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise(resolve => {
    const request = http.get(url, response => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', chunk => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('error', () => resolve({ status: 0, body: '' }));
    request.setTimeout(5000, () => {
      request.destroy();
      resolve({ status: 0, body: '' });
    });
  });
}

/** Wait for `done` (asked every 250 ms), failing with `what` and the log after `seconds`. */
async function until(
  done: () => Promise<boolean> | boolean,
  seconds: number,
  what: string,
  log: string
): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await done())) {
    if (Date.now() > deadline) {
      const tail = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').slice(-3000) : '(no log)';
      throw new Error(`${what} within ${seconds} s:\n${tail}`);
    }
    await new Promise(resolve => setTimeout(resolve, 250));
  }
}

/** A process group of its own, its output in `log`: stopped by signalling the group. */
function spawnGroup(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
  log: string
): ChildProcess {
  const out = fs.openSync(log, 'w');
  const child = spawn(command, args, { cwd, env, detached: true, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  return child;
}

/** `signal` to the process group of `child`; resolves once it has gone. */
async function stopGroup(child: ChildProcess | null, signal: NodeJS.Signals): Promise<void> {
  if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const gone = new Promise(resolve => child.once('exit', resolve));
  process.kill(-child.pid, signal);
  await gone;
}

async function switchTo(mode: string): Promise<void> {
  const answer = await get(`${ready.control}/mode/${mode}`);
  expect(answer, `the proxy's control port, switching to ${mode}`).toEqual({
    status: 200,
    body: mode
  });
}

/** Resolves once the fault box holds `word` (looked at on every frame); fails after `ms`,
 * saying what the box held then. */
async function shows(
  page: IJupyterLabPageFixture,
  word: string,
  ms: number,
  what: string
): Promise<void> {
  const selector = `${PANEL} [data-testid="gpuws-sync-error"]`;
  try {
    await page.waitForFunction(
      ([selector, word]) => (document.querySelector(selector)?.textContent ?? '').includes(word),
      [selector, word],
      { polling: 'raf', timeout: ms }
    );
  } catch {
    const held = await page.locator(selector).allInnerTexts();
    throw new Error(
      `${what}: "${word}" not shown within ${ms} ms; the box held ${JSON.stringify(held)}`
    );
  }
}

/** The fault box's own line: its text, without the button and Details below it. */
function lineOf(page: IJupyterLabPageFixture): Promise<string> {
  return page
    .locator(PANEL)
    .getByTestId('gpuws-sync-error')
    .evaluate(box =>
      Array.from(box.childNodes)
        .filter(node => node.nodeType === Node.TEXT_NODE)
        .map(node => node.textContent ?? '')
        .join('')
    );
}

test.use({
  baseURL: URL,
  // The server is stopped by the test: Galata keeps its test folder rather than delete it
  // from a server that is gone, and its trackers of kernels, sessions and terminals (which
  // proxy the page's polls through the test runner) are off: nothing here starts any.
  serverFiles: 'on',
  kernels: null,
  sessions: null,
  terminals: null,
  // Galata answers its user route (/.*\/api\/me.*/) itself, and that pattern takes in the
  // panel's /gpuws/api/metrics too: with the server stopped, those made-up answers would say
  // it answers again. The real server answers both here.
  mockUser: false
});

test.beforeAll(async () => {
  test.setTimeout(180000);
  fs.rmSync(READY, { force: true });
  fs.rmSync(STORE_FOLDER, { recursive: true, force: true });
  store = spawnGroup(
    'python',
    ['-m', 'tests.faultstore', '--ready', READY, '--folder', STORE_FOLDER],
    path.join(__dirname, '..', '..'),
    process.env,
    STORE_LOG
  );
  await until(() => fs.existsSync(READY), 120, 'the fault store did not start', STORE_LOG);
  ready = JSON.parse(fs.readFileSync(READY, 'utf8')) as IReady;
  server = spawnGroup(
    'jupyter',
    ['lab', '--config', 'jupyter_server_test_config.py', '--port', String(PORT)],
    path.join(__dirname, '..'),
    { ...process.env, ...ready.env, GPUWS_UI_TEST_FAULTS: '1', GPUWS_STORE: ready.store },
    SERVER_LOG
  );
  await until(
    async () => (await get(`${URL}/gpuws/api/sync`)).status === 200,
    120,
    'the Jupyter server did not start',
    SERVER_LOG
  );
});

test.afterAll(async () => {
  await stopGroup(server, 'SIGKILL');
  await stopGroup(store, 'SIGTERM');
});

test('each store fault reads as one line with its fix within 5 s and heals; a stopped server reads as not answering', async ({
  page
}) => {
  test.setTimeout(360000);
  await openPanel(page);
  const panel = page.locator(PANEL);
  const summary = panel.getByTestId('gpuws-sync-summary');
  const box = panel.getByTestId('gpuws-sync-error');
  fs.writeFileSync(path.join(ROOT, 'before.txt'), 'written while the store behaves\n');
  await expect(summary).toContainText('All saved', { timeout: 30000 });
  await expect(box).toHaveCount(0);

  const seconds: string[] = [];
  for (const fault of FAULTS) {
    await switchTo(fault.mode);
    const asked = Date.now();
    if (fault.cause === 'file') {
      fs.writeFileSync(
        path.join(ROOT, `during-${fault.mode}.txt`),
        `written during ${fault.mode}\n`
      );
    }
    // Within 5 s of the store being asked (for the lease: its renewal, every second, comes
    // within one of the switch). Looked at every frame: expect's own retries, a second apart
    // after the first two, would blur the bound.
    await shows(page, fault.words[0], 5000, `the ${fault.mode} fault's line`);
    seconds.push(`${fault.mode} ${((Date.now() - asked) / 1000).toFixed(1)} s`);
    const line = await lineOf(page);
    expect(line).not.toContain('\n');
    for (const word of fault.words) {
      expect(line, `the ${fault.mode} fault's line`).toContain(word);
    }
    // Only a store that does not answer is said not to: a 503 or a refused certificate is an
    // answer, and its own line names its cause.
    const never = [...(fault.never ?? []), ...(fault.mode === 'stall' ? [] : ['not answering'])];
    for (const word of never) {
      expect(line, `the ${fault.mode} fault's line`).not.toContain(word);
    }
    const shown = await panel.innerText();
    for (const raw of RAW) {
      expect(shown, `the panel during the ${fault.mode} fault`).not.toContain(raw);
    }
    await panel.screenshot({ path: test.info().outputPath(`${fault.mode}.png`) });

    // Healed by itself once the store behaves: the line gone, and nothing pending (the file
    // written meanwhile, pending while the store failed, is saved).
    await switchTo('pass');
    await expect(box, `the ${fault.mode} fault healed`).toHaveCount(0, { timeout: 30000 });
    await expect(summary).toContainText('All saved', { timeout: 30000 });
  }
  test.info().annotations.push({ type: 'fault shown after', description: seconds.join(', ') });
  console.log(`fault shown after: ${seconds.join(', ')}`);

  // The Jupyter server stopped: one line says so, the sections are greyed and nothing counts on.
  const countdown = panel.getByTestId('gpuws-countdown');
  await expect(countdown).toContainText(/^\d+:\d\d left/);
  const noGpu = panel.getByTestId('gpuws-no-gpu'); // this machine has none
  await expect(noGpu).toContainText('figures below are still live');
  await stopGroup(server, 'SIGKILL');
  await expect(panel.getByTestId('gpuws-unanswered')).toContainText(
    'The Jupyter server is not answering (since',
    { timeout: 10000 }
  );
  await expect(panel.locator('.jp-gpuws-body')).toHaveClass(/jp-gpuws-mod-unanswered/);
  await expect(noGpu).not.toContainText('still live'); // they are the server's last
  const held = await countdown.innerText();
  // Negative: for 3 s the countdown must not move (it moves every second while live).
  await page.waitForTimeout(3000);
  expect(await countdown.innerText(), 'the countdown, 3 s after').toBe(held);
  await panel.screenshot({ path: test.info().outputPath('server-stopped.png') });
});
