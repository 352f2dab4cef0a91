// Each anomaly episode of a training run (a loss not finite, a spike, a stall, …) shown once per
// browser tab as a notification with what to do and the way to the dashboard.
import { Notification } from '@jupyterlab/apputils';

import { ITrainingAnomaly } from '../api';
import { EpisodeMemory } from '../notices';
import { TrainingModel } from './model';

export class TrainingNotifier {
  enabled = true;

  constructor(
    private _model: TrainingModel,
    private _openDashboard: () => void
  ) {
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    const anomalies = this._model.state?.anomalies;
    if (!anomalies || !this.enabled) {
      return;
    }
    for (const anomaly of this._told.untold(anomalies)) {
      this._notify(anomaly);
    }
  }

  private _notify(anomaly: ITrainingAnomaly): void {
    const message = `${anomaly.message} ${anomaly.advice}`;
    const options = {
      autoClose: false as const,
      actions: [{ label: 'Open Training and GPUs', callback: this._openDashboard }]
    };
    if (anomaly.level === 'error') {
      Notification.error(message, options);
    } else {
      Notification.warning(message, options);
    }
  }

  private _told = new EpisodeMemory('jupyter_gpu_ws:notified-training');
}
