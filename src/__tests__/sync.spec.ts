// The sync's model (its status polled, a persist followed to its end) and its words: never
// "all saved" unless the store outlives this machine and nothing is pending.
import { Poll } from '@lumino/polling';

import { IJob, ISyncStatus } from '../api';
import { SYNC_INTERVAL, SYNC_INTERVAL_PASSING, SyncModel } from '../sync/model';
import {
  CANCELLING,
  LOCAL_STORE_ADVICE,
  persistResult,
  progressText,
  syncSummary,
  syncWord,
  TOAST_MAX,
  toastText
} from '../sync/words';
import { answer, asked } from './server';

jest.mock('../api', () => ({ requestAPI: jest.fn() }));

const NOW = 1_800_000_000;

function status(fields: Partial<ISyncStatus> = {}): ISyncStatus {
  // Cast: a test names only the fields it is about.
  return {
    state: 'idle',
    pending_files: 0,
    pending_bytes: 0,
    last_error: null,
    ...fields
  } as ISyncStatus;
}

function job(fields: Partial<IJob> = {}): IJob {
  return {
    id: 'p1',
    kind: 'persist',
    state: 'running',
    started: NOW,
    finished: null,
    steps: [],
    progress: {
      phase: '',
      files_done: 0,
      files_total: 0,
      bytes_done: 0,
      bytes_total: 0,
      current: null
    },
    errors: [],
    result: {},
    ...fields
  } as IJob;
}

let model: SyncModel;

beforeEach(() => {
  answer({});
  model = new SyncModel();
});

afterEach(() => {
  model.dispose();
  jest.useRealTimers();
});

describe('the sync summary', () => {
  it('says all saved with the age only for a store that outlives this machine', () => {
    expect(syncSummary(status({ last_sync: NOW - 12 }), NOW)).toBe('All saved 12 s ago');
    expect(syncSummary(status({ last_sync: NOW - 12, store_same_disk: true }), NOW)).toBe(
      "Copied to this machine's disk 12 s ago, not saved elsewhere"
    );
  });

  it('never says all saved while the lease is not renewed', () => {
    const unrenewed = status({ last_sync: NOW - 12, lease_error: 'Cannot renew the lease: 412' });
    expect(syncSummary(unrenewed, NOW)).toBe(
      'The lease is not renewed: writing stops if it runs out (below)'
    );
  });

  it('says what is pending rather than saved', () => {
    const pending = status({ last_sync: NOW - 12, pending_files: 3, pending_bytes: 2 ** 20 });
    expect(syncSummary(pending, NOW)).toBe('3 files, 1.0 MiB pending');
    expect(syncSummary({ ...pending, store_down: 'refused' }, NOW)).toBe(
      'Store not answering: 3 files, 1.0 MiB pending'
    );
  });

  it('is not all saved while a persist still runs', () => {
    const running = status({ last_sync: NOW - 1, persist: job() });
    expect(syncSummary(running, NOW)).toBe('Persisting…');
    expect(syncSummary({ ...running, persist: job({ cancelling: true }) }, NOW)).toBe(
      'Cancelling the persist…'
    );
  });

  it('says the persist the page follows, also over the files it is about to upload', () => {
    // The sync status polled before the persist began (pending: the notebook it saved first);
    // the page's own persist job, cancelled since, is the newer word.
    const before = status({ last_sync: NOW - 2, pending_files: 1, pending_bytes: 1100 });
    expect(syncSummary(before, NOW)).toBe('1 file, 1.1 KiB pending');
    expect(syncSummary(before, NOW, job({ cancelling: true }))).toBe('Cancelling the persist…');
    expect(syncSummary(before, NOW, job({ state: 'done' }))).toBe('1 file, 1.1 KiB pending');
  });

  it('names the other writer and when this runtime takes over', () => {
    const lease = { user: 'ana', host: 'gpu-7', pid: 1, ttl: 60 } as ISyncStatus['lease'];
    const readOnly = status({ state: 'read-only', lease, takeover_at: NOW + 40 });
    expect(syncSummary(readOnly, NOW)).toBe(
      'Read-only: ana@gpu-7 writes; taking over in 0:40 unless it renews'
    );
    expect(syncSummary(readOnly, NOW + 41)).toBe('Read-only: ana@gpu-7 stopped; taking over…');
  });

  it('says what the start does or waits on, and when a fault at start is tried again', () => {
    expect(
      syncSummary(status({ state: 'starting', starting: 'opening the store s3://b/p (12 s)' }), NOW)
    ).toBe('Starting: opening the store s3://b/p (12 s)…');
    expect(syncSummary(status({ state: 'starting', restoring: true }), NOW)).toBe(
      'Restoring from the store…'
    );
    expect(
      syncSummary(status({ state: 'error', starting: 'trying again by itself in 20 s' }), NOW)
    ).toBe('Not started: trying again by itself in 20 s');
    expect(syncSummary(status({ state: 'error' }), NOW)).toBe('Sync error');
  });

  it('waits with an ellipsis before the first answer', () => {
    expect(syncSummary(null, NOW)).toBe('Sync: …');
  });
});

describe("a persist's words", () => {
  it('reads its progress in files, bytes, speed and time left', () => {
    const p = {
      phase: 'upload',
      files_done: 12,
      files_total: 40,
      bytes_done: 30 * 2 ** 20,
      bytes_total: 120 * 2 ** 20,
      current: null,
      speed: 8.2 * 2 ** 20,
      eta: 11
    };
    expect(progressText(p)).toBe('12 of 40 files · 30.0 MiB of 120 MiB · 8.2 MiB/s · 0:11 left');
  });

  it("takes the server's summary, or says how a job without one ended", () => {
    const summary = {
      level: 'ok' as const,
      headline: 'All saved',
      saved_elsewhere: true,
      done: [],
      stored: null,
      errors: [],
      warnings: [],
      advice: null,
      text: 'All saved: 2 files',
      short: 'All saved'
    };
    expect(persistResult(job({ state: 'done', result: { summary } }))).toBe(summary);
    expect(persistResult(job({ state: 'failed', errors: ['the server went away'] }))).toEqual({
      level: 'error',
      text: 'Persist failed: the server went away.',
      short: 'Persist failed: the server went away.'
    });
  });

  it('fits a notification: the short line whole, or cut after its last whole clause', () => {
    expect(toastText('All saved: 1 document saved, 1 file uploaded (2.0 KiB).')).toBe(
      'All saved: 1 document saved, 1 file uploaded (2.0 KiB).'
    );
    const long =
      'Files saved, not everything: 1 document saved, 1 checkpoint taken, 3 files uploaded ' +
      '(2.0 KiB). Failed: train.ipynb: no checkpoint within 60 s; other.ipynb: the kernel died.';
    const cut = toastText(long);
    expect(cut.length).toBeLessThanOrEqual(TOAST_MAX);
    expect(cut).toBe(
      'Files saved, not everything: 1 document saved, 1 checkpoint taken, 3 files uploaded ' +
        '(2.0 KiB)…'
    );
    // Never inside a list of names.
    const names =
      'All saved: 1 document saved, 12 files uploaded (4.0 KiB), 3 files cannot be synced ' +
      '(a_link_with_a_long_name, another_link_with_a_longer_name, a_third_one_whose_name_runs_on and 1 more).';
    expect(toastText(names)).toBe('All saved: 1 document saved, 12 files uploaded (4.0 KiB)…');
  });
});

describe("the sync's few words", () => {
  it('says synced with its age when all is in a lasting store', () => {
    model.status = status({ last_sync: Date.now() / 1000 - 120 });
    expect(syncWord(model)).toMatchObject({ text: 'synced 2 min ago', level: 'ok' });
  });

  it('warns of a store on this disk instead of saying synced', () => {
    model.status = status({ last_sync: Date.now() / 1000, store_same_disk: true });
    expect(syncWord(model)).toEqual({
      text: 'local store only',
      title: LOCAL_STORE_ADVICE,
      level: 'warning'
    });
  });

  it('counts what is pending', () => {
    model.status = status({ pending_files: 1204 });
    expect(syncWord(model)).toMatchObject({ text: '1,204 pending', level: 'pending' });
  });

  it('warns while the lease is not renewed instead of saying synced', () => {
    model.status = status({
      last_sync: Date.now() / 1000 - 5,
      lease_error: 'Cannot renew',
      last_error: 'Cannot renew'
    });
    expect(syncWord(model)).toEqual({
      text: 'lease not renewed',
      title: 'Cannot renew',
      level: 'warning'
    });
  });

  it('is red when the store is down', () => {
    model.status = status({ state: 'error', store_down: 'refused', last_error: 'refused' });
    expect(syncWord(model)).toEqual({ text: 'store down', title: 'refused', level: 'error' });
  });

  it("follows a running persist's share of bytes, and its cancelling", () => {
    model.job = job({ progress: { ...job().progress, bytes_done: 1, bytes_total: 2 } });
    model.status = status({ last_sync: Date.now() / 1000 });
    expect(syncWord(model).text).toBe('persisting 50 %');
    model.job = job({ cancelling: true });
    expect(syncWord(model)).toMatchObject({ text: 'cancelling', title: CANCELLING });
  });

  it('says all synced once a release persisted everything', () => {
    model.finish();
    expect(syncWord(model).text).toBe('all synced');
  });
});

describe('the sync model', () => {
  it('takes the status, then the store workspaces once the sync runs', async () => {
    answer({
      sync: status(),
      'sync/workspaces': { workspaces: [], current: 'w', current_files: 0 }
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    await model.refresh();
    expect(model.status?.state).toBe('idle');
    expect(model.workspaces?.current).toBe('w');
    expect(model.error).toBeNull();
    expect(changes).toBeGreaterThan(0);
    await model.refresh();
    expect(asked.filter(a => a === 'GET sync/workspaces')).toHaveLength(1);
  });

  it('looks twice a second while a pass is under way, every two seconds otherwise', async () => {
    // A store that stops answering under a pass is named 3 to 3.5 s after: looked at twice a
    // second, the panel shows it within 5 s.
    const interval = (): number => (model as unknown as { poll: Poll }).poll.frequency.interval;
    const workspaces = { workspaces: [], current: 'w', current_files: 0 };
    answer({ sync: status({ state: 'syncing' }), 'sync/workspaces': workspaces });
    await model.refresh();
    expect(interval()).toBe(SYNC_INTERVAL_PASSING);
    answer({ sync: status({ state: 'idle' }), 'sync/workspaces': workspaces });
    await model.refresh();
    expect(interval()).toBe(SYNC_INTERVAL);
  });

  it('keeps the reason of a failed look until a later look succeeds', async () => {
    answer({ sync: new Error('Service Unavailable') });
    await model.refresh();
    expect(model.error).toBe('Service Unavailable');
    answer({ sync: status({ state: 'starting' }) });
    await model.refresh();
    expect(model.error).toBeNull();
    expect(model.status?.state).toBe('starting');
  });

  it('asks for the pending files only while their list is open', async () => {
    answer({
      sync: status({ state: 'starting' }),
      'sync/pending?limit=200': { files: [], total: 0 }
    });
    await model.togglePending();
    expect(model.pending).toEqual({ files: [], total: 0 });
    await model.togglePending();
    expect(model.pending).toBeNull();
    await model.refresh();
    expect(asked.filter(a => a.startsWith('GET sync/pending'))).toHaveLength(1);
  });

  it('follows a persist to its end, through the emergency persist that took over', async () => {
    jest.useFakeTimers();
    answer({
      sync: status({ state: 'starting' }),
      persist: job(),
      'persist/p1': job({ result: { superseded_by: 'p2' } }),
      'persist/p2': job({ id: 'p2', state: 'done', finished: NOW })
    });
    const seen: string[] = [];
    const started = await model.startPersist();
    expect(model.persisting).toBe(true);
    const following = model.followPersist(started, current => seen.push(current.id));
    await jest.advanceTimersByTimeAsync(1000);
    const end = await following;
    expect(end.id).toBe('p2');
    expect(end.state).toBe('done');
    expect(seen).toEqual(['p1', 'p2']);
    expect(model.job?.id).toBe('p2');
    expect(model.persisting).toBe(false);
  });

  it('ends a persist it can no longer see as failed, with why', async () => {
    jest.useFakeTimers();
    answer({ sync: status({ state: 'starting' }), 'persist/p1': new Error('Bad Gateway') });
    const following = model.followPersist(job());
    await jest.advanceTimersByTimeAsync(400);
    const end = await following;
    expect(end).toMatchObject({ state: 'failed', errors: ['Bad Gateway'] });
  });

  it('shows a cancelled persist as cancelling at once', async () => {
    model.job = job();
    answer({ 'persist/p1': job({ cancelling: true }) });
    await model.cancel();
    expect(asked).toContain('DELETE persist/p1');
    expect(model.job?.cancelling).toBe(true);
  });

  it("gives the server's reason when a take-over is refused, and looks again", async () => {
    answer({
      'sync/lease': new Error('the lease is held'),
      sync: status({ state: 'read-only' }),
      'sync/workspaces': { workspaces: [], current: 'w', current_files: 0 }
    });
    await expect(model.takeOver()).rejects.toThrow('the lease is held');
    expect(model.status?.state).toBe('read-only');
  });

  it('shows the newer of its own persist and the one the server ran', () => {
    model.job = job({ id: 'mine', started: NOW });
    model.status = status({ persist: job({ id: 'auto', started: NOW + 5 }) });
    expect(model.currentPersist?.id).toBe('auto');
  });
});
