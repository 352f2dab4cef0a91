// The environment model: how many packages a restore installs, and a snapshot or a restore
// followed to its end.
import { IEnvState, IJob } from '../api';
import { EnvironmentModel } from '../environment/model';
import { answer, asked } from './server';

jest.mock('../api', () => ({ requestAPI: jest.fn() }));

const pkg = (name: string) => ({ name, version: '1.0' });

function job(state: IJob['state']): IJob {
  // Cast: a test names only the fields it is about.
  return { id: 'e1', kind: 'env-restore', state, errors: [], result: {} } as unknown as IJob;
}

let model: EnvironmentModel;

beforeEach(() => {
  answer({});
  model = new EnvironmentModel(null);
});

afterEach(() => {
  model.dispose();
  jest.useRealTimers();
});

it('restores what was removed or changed since the snapshot, never what was added', async () => {
  const diff = {
    removed: [pkg('a')],
    changed: [{ name: 'b', from_version: '1', to_version: '2' }],
    added: [pkg('c'), pkg('d')]
  };
  answer({ env: { state: 'differs', diff } as unknown as IEnvState });
  await model.refresh();
  expect(model.toRestore).toBe(2);
  expect(model.canRestartKernels).toBe(false);
});

it('follows a restore to its end, busy meanwhile, then looks at the environment again', async () => {
  jest.useFakeTimers();
  answer({
    'env/restore': job('running'),
    'env/restore/e1': job('done'),
    env: { state: 'matches' } as IEnvState
  });
  const running = model.run('env/restore', '{}');
  await jest.advanceTimersByTimeAsync(0);
  expect(model.busy).toBe(true);
  await jest.advanceTimersByTimeAsync(600);
  expect((await running).state).toBe('done');
  expect(model.busy).toBe(false);
  expect(model.state?.state).toBe('matches');
  // (The poll's own looks at the environment may come between.)
  expect(asked.filter(a => a.includes('env/restore'))).toEqual([
    'POST env/restore',
    'GET env/restore/e1'
  ]);
  expect(asked[asked.length - 1]).toBe('GET env');
});

it("refuses to start with the server's reason", async () => {
  answer({ 'env/snapshots': new Error('a restore is running') });
  await expect(model.run('env/snapshots', '{}')).rejects.toThrow('a restore is running');
  expect(model.job).toBeNull();
});
