/**
 * What the open panel costs the browser: Chromium's CPU over an idle JupyterLab page with the
 * GPU Workspace panel open, against the same page with the panel closed (JupyterLab's own
 * cost), in one run, rounds interleaved.
 *
 *   node bench/panel_cpu.js http://localhost:8888/lab?token=… [--seconds 20] [--rounds 3]
 *       [--css "<a rule added to the open panel's page, for a third row>"]
 *
 * `--css` measures a change side by side, e.g. the bars' former animation:
 * --css ".jp-gpuws-bar-fill { transition: width 0.4s ease; }".
 *
 * Needs Galata's packages (cd ui-tests && jlpm install) and Chromium (CHROMIUM_PATH, default
 * /usr/bin/chromium). Prints Chromium's CPU (all its processes, from /proc) per second of
 * idling, and the renderer's layouts and main-thread time (Chrome DevTools Protocol).
 */
const path = require('path');
const fs = require('fs');
const { chromium } = require(path.join(__dirname, '..', 'ui-tests', 'node_modules', 'playwright'));

const PANEL = 'li[data-id="jp-gpuws-panel"]';

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 ? Number(process.argv[at + 1]) : fallback;
}

/** CPU seconds used so far by the processes of `pids` and their descendants. */
function cpuOf(root) {
  const children = {};
  for (const pid of fs.readdirSync('/proc').filter(p => /^\d+$/.test(p))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      (children[fields[1]] ??= []).push({ pid, ticks: +fields[11] + +fields[12] });
    } catch {
      // gone meanwhile
    }
  }
  let ticks = 0;
  const walk = pid => {
    for (const child of children[pid] ?? []) {
      ticks += child.ticks;
      walk(child.pid);
    }
  };
  walk(String(root));
  return ticks / 100; // USER_HZ
}

async function idle(browser, url, open, seconds, css) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(url);
  await page.waitForSelector(PANEL, { timeout: 60000 });
  const visible = await page.locator('#jp-gpuws-panel').isVisible();
  if (visible !== open) {
    await page.click(PANEL);
  }
  if (css) {
    await page.addStyleTag({ content: css });
  }
  await page.waitForTimeout(3000); // the page settles
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const metrics = async () =>
    Object.fromEntries(
      (await cdp.send('Performance.getMetrics')).metrics.map(m => [m.name, m.value])
    );
  const before = await metrics();
  const cpu = cpuOf(process.pid);
  await page.waitForTimeout(seconds * 1000);
  const used = cpuOf(process.pid) - cpu;
  const after = await metrics();
  await page.close();
  return {
    cpu: used / seconds,
    layouts: (after.LayoutCount - before.LayoutCount) / seconds,
    main: (after.TaskDuration - before.TaskDuration) / seconds
  };
}

(async () => {
  const url = process.argv[2];
  if (!url || url.startsWith('--')) {
    console.error('usage: node bench/panel_cpu.js <JupyterLab URL with its token>');
    process.exit(2);
  }
  const seconds = option('seconds', 20);
  const rounds = option('rounds', 3);
  const cssAt = process.argv.indexOf('--css');
  const css = cssAt > 0 ? process.argv[cssAt + 1] : null;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu']
  });
  const results = { open: [], closed: [], css: [] };
  for (let round = 0; round < rounds; round++) {
    results.open.push(await idle(browser, url, true, seconds, null));
    results.closed.push(await idle(browser, url, false, seconds, null));
    if (css) {
      results.css.push(await idle(browser, url, true, seconds, css));
    }
  }
  await browser.close();
  const median = xs => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const row = (name, runs) =>
    `| ${name} | ${median(runs.map(r => r.cpu)).toFixed(3)} | ` +
    `${median(runs.map(r => r.layouts)).toFixed(1)} | ` +
    `${(1000 * median(runs.map(r => r.main))).toFixed(0)} |`;
  console.log(`# panel_cpu: ${rounds} rounds of ${seconds} s idle each, interleaved; medians\n`);
  console.log('| page | Chromium CPU (cores) | layouts per s | renderer main thread (ms per s) |');
  console.log('|---|---|---|---|');
  console.log(row('JupyterLab, the panel open', results.open));
  console.log(row('JupyterLab, the panel closed', results.closed));
  if (css) {
    console.log(row(`the panel open, with \`${css}\``, results.css));
  }
  const ratio = median(results.open.map(r => r.cpu)) / median(results.closed.map(r => r.cpu));
  console.log(`\nthe open panel: ${ratio.toFixed(1)}x the CPU of the page without it`);
})();
