// The tracked training runs (polled): pace, ETA, verdict and anomalies; each anomaly episode
// shown once as a notification with what to do; the status bar's few words.
import { Notification } from '@jupyterlab/apputils';

import { ITrainingAnomaly, ITrainingRun, ITrainingState, requestAPI } from './api';
import { formatDuration } from './format';
import { PolledModel } from './polled';

const NOTIFIED_KEY = 'jupyter_gpu_ws:notified-training';

export class TrainingModel extends PolledModel {
  state: ITrainingState | null = null;

  constructor() {
    super(2000, 30000);
  }

  get runs(): ITrainingRun[] {
    return this.state?.runs ?? [];
  }

  async refresh(): Promise<void> {
    try {
      this.state = await requestAPI<ITrainingState>('training');
      this.error = null;
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }
}

/** Shows each anomaly episode once per browser tab (remembered across reloads of the tab). */
export class TrainingNotifier {
  enabled = true;

  constructor(
    private _model: TrainingModel,
    private _openDashboard: () => void
  ) {
    try {
      this._notified = new Set(JSON.parse(sessionStorage.getItem(NOTIFIED_KEY) ?? '[]'));
    } catch {
      this._notified = new Set();
    }
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    const anomalies = this._model.state?.anomalies;
    if (!anomalies || !this.enabled) {
      return;
    }
    let added = false;
    for (const anomaly of anomalies) {
      if (this._notified.has(anomaly.id)) {
        continue;
      }
      this._notified.add(anomaly.id);
      added = true;
      notify(anomaly, this._openDashboard);
    }
    if (added) {
      // Remember only the episodes still open, so the set stays small.
      const open = new Set(anomalies.map(a => a.id));
      this._notified = new Set([...this._notified].filter(id => open.has(id)));
      sessionStorage.setItem(NOTIFIED_KEY, JSON.stringify([...this._notified]));
    }
  }

  private _notified: Set<string>;
}

function notify(anomaly: ITrainingAnomaly, openDashboard: () => void): void {
  const message = `${anomaly.message} ${anomaly.advice}`;
  const options = {
    autoClose: false as const,
    actions: [{ label: 'Open Training and GPUs', callback: openDashboard }]
  };
  if (anomaly.level === 'error') {
    Notification.error(message, options);
  } else {
    Notification.warning(message, options);
  }
}

/** "1,200" */
export function formatCount(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

/** "step 1,200/5,000" (steps done, of the total). */
export function stepText(run: ITrainingRun): string {
  if (run.done_steps === null) {
    return 'no step yet';
  }
  return run.total
    ? `step ${formatCount(run.done_steps)}/${formatCount(run.total)}`
    : `step ${formatCount(run.done_steps)}`;
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
  return `ETA ${formatDuration(run.eta)}`;
}

/** The level a run's verdict and anomalies call for: 'error', 'warning', 'ok' or 'none'. */
export function runLevel(run: ITrainingRun): string {
  if (run.anomalies.some(a => a.level === 'error')) {
    return 'error';
  }
  if (run.verdict?.state === 'short' || run.anomalies.length > 0) {
    return 'warning';
  }
  return run.verdict?.state === 'finishes' || run.verdict?.state === 'done' ? 'ok' : 'none';
}

/** The status bar's words for the live run the user most needs to see: "step 1,200/5,000 · ETA 2 h 10 min". */
export function trainingWord(model: TrainingModel): { text: string; title: string; level: string } {
  const live = model.runs.filter(r => r.live && r.state !== 'done');
  if (live.length === 0) {
    return { text: '', title: '', level: 'none' };
  }
  const order = ['error', 'warning', 'ok', 'none'];
  const run = [...live].sort((a, b) => order.indexOf(runLevel(a)) - order.indexOf(runLevel(b)))[0];
  const eta = run.eta !== null ? ` · ETA ${formatDuration(run.eta)}` : '';
  const more = live.length > 1 ? ` (+${live.length - 1})` : '';
  const title = [run.run, run.verdict?.message ?? '', ...run.anomalies.map(a => a.message)]
    .filter(Boolean)
    .join('\n');
  return { text: `${stepText(run)}${eta}${more}`, title, level: runLevel(run) };
}
