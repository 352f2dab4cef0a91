// A training run in the user's words: its step, its ETA, its tone, and the status bar's few
// words for the run that most needs the user.
import { ITrainingRun } from '../api';
import { duration, IWord, Level, stepOf } from '../vocabulary';
import { TrainingModel } from './model';

/** "step 1,200/5,000" (steps done, of the total). */
export function stepText(run: ITrainingRun): string {
  if (run.done_steps === null) {
    return 'no step yet';
  }
  return stepOf(run.done_steps, run.total);
}

/** "ETA 2 h 10 min" beside a run's pace, or null: a finished run has none (its verdict says it is
 * done), and with no deadline to weigh it against the verdict already says the ETA. */
export function etaText(run: ITrainingRun): string | null {
  if (
    run.eta === null ||
    run.state === 'done' ||
    run.verdict?.state === 'done' ||
    run.verdict?.state === 'no-deadline'
  ) {
    return null;
  }
  return `ETA ${duration(run.eta)}`;
}

/** The tone a run's verdict and anomalies call for: 'error', 'warning', 'ok' or 'none'. */
export function runLevel(run: ITrainingRun): Level {
  if (run.anomalies.some(a => a.level === 'error')) {
    return 'error';
  }
  if (run.verdict?.state === 'short' || run.anomalies.length > 0) {
    return 'warning';
  }
  return run.verdict?.state === 'finishes' || run.verdict?.state === 'done' ? 'ok' : 'none';
}

/** The status bar's words for the live run the user most needs to see: "step 1,200/5,000 · ETA 2 h 10 min". */
export function trainingWord(model: TrainingModel): IWord {
  const live = model.runs.filter(r => r.live && r.state !== 'done');
  if (live.length === 0) {
    return { text: '', title: '', level: 'none' };
  }
  const order = ['error', 'warning', 'ok', 'none'];
  const run = [...live].sort((a, b) => order.indexOf(runLevel(a)) - order.indexOf(runLevel(b)))[0];
  const eta = run.eta !== null ? ` · ETA ${duration(run.eta)}` : '';
  const more = live.length > 1 ? ` (+${live.length - 1})` : '';
  const title = [run.run, run.verdict?.message ?? '', ...run.anomalies.map(a => a.message)]
    .filter(Boolean)
    .join('\n');
  return { text: `${stepText(run)}${eta}${more}`, title, level: runLevel(run) };
}
