// Shows each alert episode the server reports as one JupyterLab notification.
import { Notification } from '@jupyterlab/apputils';

import { ISample } from './api';
import { MetricsModel } from './metrics';

const STORAGE_KEY = 'jupyter_gpu_ws:notified-alerts';

export class AlertNotifier {
  enabled = true;

  constructor(
    private _model: MetricsModel,
    private _openPanel: () => void
  ) {
    try {
      this._notified = new Set(JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? '[]'));
    } catch {
      this._notified = new Set();
    }
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    const sample: ISample | null = this._model.latest;
    if (!sample || !this.enabled) {
      return;
    }
    let added = false;
    for (const alert of sample.alerts) {
      if (this._notified.has(alert.id)) {
        continue;
      }
      this._notified.add(alert.id);
      added = true;
      Notification.warning(alert.message, {
        autoClose: false,
        actions: [{ label: 'Open GPU panel', callback: this._openPanel }]
      });
    }
    if (added) {
      // Remember only episodes still open, so the set stays small.
      const open = new Set(sample.alerts.map(a => a.id));
      this._notified = new Set([...this._notified].filter(id => open.has(id)));
      sessionStorage.setItem(STORAGE_KEY, JSON.stringify([...this._notified]));
    }
  }

  private _notified: Set<string>;
}
