// Each alert episode the server reports (a GPU idle, its memory near full, a disk near full)
// shown once as a JupyterLab notification with the way to the panel.
import { Notification } from '@jupyterlab/apputils';

import { EpisodeMemory } from '../notices';
import { MetricsModel } from './model';

export class AlertNotifier {
  enabled = true;

  constructor(
    private _model: MetricsModel,
    private _openPanel: () => void
  ) {
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    const sample = this._model.latest;
    if (!sample || !this.enabled) {
      return;
    }
    for (const alert of this._told.untold(sample.alerts)) {
      Notification.warning(alert.message, {
        autoClose: false,
        actions: [{ label: 'Open GPU panel', callback: this._openPanel }]
      });
    }
  }

  private _told = new EpisodeMemory('jupyter_gpu_ws:notified-alerts');
}
