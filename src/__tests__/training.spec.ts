// A training run's words (step, ETA, tone) and the status bar's words for the run that most
// needs the user; the runs' model polled from the server.
import { ITrainingAnomaly, ITrainingRun, ITrainingVerdict } from '../api';
import { TrainingModel } from '../training/model';
import { etaText, runLevel, stepText, trainingWord } from '../training/words';
import { answer } from './server';

jest.mock('../api', () => ({ requestAPI: jest.fn() }));

function run(fields: Partial<ITrainingRun> = {}): ITrainingRun {
  // Cast: a test names only the fields it is about.
  return {
    run: 'train.ipynb',
    live: true,
    state: 'running',
    done_steps: 1200,
    total: 5000,
    eta: 2 * 3600 + 10 * 60,
    verdict: null,
    anomalies: [],
    ...fields
  } as ITrainingRun;
}

const verdict = (state: ITrainingVerdict['state'], message = '') =>
  ({ state, message }) as ITrainingVerdict;
const anomaly = (level: ITrainingAnomaly['level'], message: string) =>
  ({ id: message, level, message }) as ITrainingAnomaly;

let model: TrainingModel;

beforeEach(() => {
  answer({});
  model = new TrainingModel();
});

afterEach(() => model.dispose());

describe("a run's words", () => {
  it('reads the steps done of the total, or that none was taken yet', () => {
    expect(stepText(run())).toBe('step 1,200/5,000');
    expect(stepText(run({ total: null }))).toBe('step 1,200');
    expect(stepText(run({ done_steps: null }))).toBe('no step yet');
  });

  it('gives an ETA only while it says something the verdict does not', () => {
    expect(etaText(run())).toBe('ETA 2 h 10 min');
    expect(etaText(run({ state: 'done' }))).toBeNull();
    expect(etaText(run({ verdict: verdict('no-deadline') }))).toBeNull();
    expect(etaText(run({ eta: null }))).toBeNull();
  });

  it('takes its tone from its anomalies first, then its verdict', () => {
    expect(runLevel(run({ anomalies: [anomaly('error', 'loss is NaN')] }))).toBe('error');
    expect(runLevel(run({ verdict: verdict('short') }))).toBe('warning');
    expect(runLevel(run({ anomalies: [anomaly('warning', 'stalled')] }))).toBe('warning');
    expect(runLevel(run({ verdict: verdict('finishes') }))).toBe('ok');
    expect(runLevel(run())).toBe('none');
  });
});

describe("the status bar's training words", () => {
  it('says nothing without a live run', async () => {
    answer({ training: { runs: [run({ live: false }), run({ state: 'done' })], anomalies: [] } });
    await model.refresh();
    expect(trainingWord(model).text).toBe('');
  });

  it('shows the run that most needs the user, and how many others run', async () => {
    const fine = run({ run: 'a', verdict: verdict('finishes', 'finishes 1 h early') });
    const short = run({
      run: 'b',
      done_steps: 10,
      total: 100,
      eta: 40,
      verdict: verdict('short', 'short by 5 min')
    });
    answer({ training: { runs: [fine, short], anomalies: [] } });
    await model.refresh();
    expect(trainingWord(model)).toEqual({
      text: 'step 10/100 · ETA 40 s (+1)',
      title: 'b\nshort by 5 min',
      level: 'warning'
    });
  });
});

it('keeps the reason of a failed look until a later look succeeds', async () => {
  answer({ training: new Error('Internal Server Error') });
  await model.refresh();
  expect(model.error).toBe('Internal Server Error');
  expect(model.runs).toEqual([]);
  answer({ training: { runs: [run()], anomalies: [] } });
  await model.refresh();
  expect(model.error).toBeNull();
  expect(model.runs).toHaveLength(1);
});
