// The runtime's model (the countdown between two looks, a release followed to its end) and the
// few words with a tone that the status bar and the header say about the time left.
import { IRuntimeState } from '../api';
import { RuntimeModel } from '../runtime/model';
import { runtimeWord } from '../runtime/words';
import { SyncModel } from '../sync/model';
import { answer } from './server';

jest.mock('../api', () => ({ requestAPI: jest.fn() }));

function state(fields: Partial<IRuntimeState> = {}): IRuntimeState {
  const now = Date.now() / 1000;
  // Cast: a test names only the fields it is about.
  return {
    now,
    start: now - 600,
    deadline: null,
    source: null,
    notices: [],
    errors: [],
    release: null,
    ...fields
  } as IRuntimeState;
}

let sync: SyncModel;
let model: RuntimeModel;

beforeEach(() => {
  answer({});
  sync = new SyncModel();
  model = new RuntimeModel(sync);
});

afterEach(() => {
  model.dispose();
  sync.dispose();
  jest.useRealTimers();
});

it("counts down from the server's clock, not the page's", async () => {
  const server = Date.now() / 1000 + 3600; // the page's clock is an hour behind
  answer({ runtime: state({ now: server, deadline: server + 600 }) });
  await model.refresh();
  expect(model.remaining()).toBeGreaterThan(590);
  expect(model.remaining()).toBeLessThanOrEqual(600);
});

it('has no time left to count without a deadline', async () => {
  answer({ runtime: state() });
  await model.refresh();
  expect(model.remaining()).toBeNull();
  expect(runtimeWord(model)).toEqual({ text: '', title: '', level: 'none' });
});

it('moves the countdown every second while there is a deadline', () => {
  jest.useFakeTimers();
  model.dispose();
  model = new RuntimeModel(sync);
  let ticks = 0;
  model.changed.connect(() => ticks++);
  jest.advanceTimersByTime(3000);
  expect(ticks).toBe(0);
  model.state = state({ deadline: Date.now() / 1000 + 600 });
  jest.advanceTimersByTime(3000);
  expect(ticks).toBe(3);
});

it('turns amber from 10 minutes left and red from 2', async () => {
  const now = Date.now() / 1000;
  // Half a second over each whole minute: the page's clock moves on between the look and the
  // words, and a deadline exactly 3600 s away read "59 min left" once it had (failed in CI).
  answer({ runtime: state({ now, deadline: now + 3600.5, source: 'max_runtime' }) });
  await model.refresh();
  expect(runtimeWord(model)).toMatchObject({ text: '1 h 00 left', level: 'ok' });
  expect(runtimeWord(model).title).toMatch(/\(runtime limit\)$/);
  answer({ runtime: state({ now, deadline: now + 540.5 }) });
  await model.refresh();
  expect(runtimeWord(model)).toMatchObject({ text: '9 min left', level: 'warning' });
  answer({ runtime: state({ now, deadline: now + 100 }) });
  await model.refresh();
  expect(runtimeWord(model).level).toBe('error');
});

it('keeps the reason of a failed look until a later look succeeds', async () => {
  answer({ runtime: new Error('Forbidden') });
  await model.refresh();
  expect(model.error).toBe('Forbidden');
  answer({ runtime: state() });
  await model.refresh();
  expect(model.error).toBeNull();
});

it('says why a release was not made, and keeps asking the server', async () => {
  jest.useFakeTimers();
  const kept = state({ release: { job_id: 'r', state: 'kept', error: 'the store refused' } });
  answer({ runtime: kept });
  const following = model.followRelease();
  await jest.advanceTimersByTimeAsync(600);
  expect(await following).toBe('kept');
  expect(model.released).toBe(false);
  expect(model.isDisposed).toBe(false);
  expect(model.state?.release?.error).toBe('the store refused');
});

it('ends with the server gone: released, and nothing more asked of it or of the sync', async () => {
  jest.useFakeTimers();
  answer({ runtime: new Error('Failed to fetch') });
  const following = model.followRelease();
  await jest.advanceTimersByTimeAsync(600);
  expect(await following).toBe('released');
  expect(model.released).toBe(true);
  expect(model.isDisposed).toBe(true);
  expect(sync.released).toBe(true);
  expect(sync.isDisposed).toBe(true);
  expect(runtimeWord(model).text).toBe('released');
});
