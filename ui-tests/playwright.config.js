/**
 * Galata in Debian's Chromium. Six servers: the plain one (this machine has no GPU), one
 * reading simulated GPUs through the NVML test double, for the GPU cards, one that
 * release.spec.ts releases, which stops it (Playwright does not mind a web server that exits
 * once it has started: it only watches for that while waiting for the server's URL), and a
 * fresh machine's, whose workspace is new while the store holds another (workspaces.spec.ts),
 * one for the panel's reviewed pictures without a GPU (panel-layout.spec.ts), which no other
 * test touches, and a newcomer's first server, which first-hour.spec.ts walks through.
 */
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

module.exports = {
  ...baseConfig,
  timeout: 90000,
  retries: 0,
  workers: 1,
  // The reviewed pictures the panel is compared with (toHaveScreenshot) live with the docs.
  snapshotPathTemplate: path.join(__dirname, '..', 'docs', 'images', 'compared', '{arg}{ext}'),
  use: {
    ...baseConfig.use,
    video: 'off',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu']
    }
  },
  webServer: [
    {
      command: 'jlpm start',
      url: 'http://localhost:8888/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    },
    {
      command: 'jlpm start:gpus',
      url: 'http://localhost:8889/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    },
    {
      command: 'jlpm start:release',
      url: 'http://localhost:8890/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    },
    {
      command: 'jlpm start:fresh',
      url: 'http://localhost:8891/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    },
    {
      command: 'jlpm start:layout',
      url: 'http://localhost:8892/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    },
    {
      command: 'jlpm start:first-hour',
      url: 'http://localhost:8893/lab',
      timeout: 120 * 1000,
      reuseExistingServer: !process.env.CI
    }
  ]
};
