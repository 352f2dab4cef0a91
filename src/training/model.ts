// The tracked training runs (polled): pace, ETA, verdict and anomalies; and their curves, asked
// for while the dashboard is open.
import { ITrainingHistory, ITrainingRun, ITrainingState, requestAPI } from '../api';
import { PolledModel } from '../polled';

export class TrainingModel extends PolledModel {
  state: ITrainingState | null = null;

  constructor() {
    super(2000, 30000);
  }

  get runs(): ITrainingRun[] {
    return this.state?.runs ?? [];
  }

  protected async load(): Promise<void> {
    this.state = await requestAPI<ITrainingState>('training');
  }
}

/** The curves, asked for every few seconds while the dashboard is open. */
export class TrainingHistoryModel extends PolledModel {
  history: ITrainingHistory | null = null;

  constructor() {
    super(5000, 60000);
  }

  protected async load(): Promise<void> {
    this.history = await requestAPI<ITrainingHistory>('training/history');
  }
}
