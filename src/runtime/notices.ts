// The runtime's notices (a deadline near, a preemption notice, a persist that ran) shown once
// each as JupyterLab notifications, a warning with a Persist now action.
import { Notification } from '@jupyterlab/apputils';

import { IRuntimeState } from '../api';
import { count } from '../vocabulary';
import { RuntimeModel } from './model';

export class RuntimeNotifier {
  constructor(
    private _model: RuntimeModel,
    private _persist: () => void
  ) {
    _model.changed.connect(this._check, this);
  }

  private _check(): void {
    // `changed` also ticks every second: only a new answer of the server can bring notices.
    const state = this._model.state;
    if (state && state !== this._last) {
      this._last = state;
      this._announce(state);
    }
  }

  /** Each notice once per browser (remembered across reloads for this server's run); a page
   * opened later shows the latest warning, with the time left as it is now. */
  private _announce(state: IRuntimeState): void {
    const key = `gpuws-runtime-notices-${Math.round(state.start)}`;
    if (this._seen === null) {
      const stored = window.localStorage.getItem(key);
      this._seen = stored === null ? null : Number(stored);
    }
    const fresh = state.notices.filter(n => this._seen === null || n.id > this._seen);
    for (const notice of fresh) {
      const old = state.now - notice.time > 120;
      if (old && notice.level !== 'warning') {
        continue;
      }
      if (old && notice !== fresh.filter(n => n.level === 'warning').pop()) {
        continue; // only the latest of the old warnings, told anew
      }
      const left = this._model.remaining();
      const message =
        old && left !== null
          ? `This runtime ends in about ${count(Math.max(1, Math.round(left / 60)), 'minute')}. Persist now to keep your work.`
          : notice.message;
      const actions =
        notice.level === 'warning' ? [{ label: 'Persist now', callback: this._persist }] : [];
      const type =
        notice.level === 'error' ? 'error' : notice.level === 'warning' ? 'warning' : 'info';
      Notification.emit(message, type, {
        autoClose: notice.level === 'info' ? 8000 : false,
        actions
      });
    }
    this._seen = Math.max(this._seen ?? 0, ...state.notices.map(n => n.id));
    try {
      window.localStorage.setItem(key, String(this._seen));
    } catch {
      // storage full or disabled: notices may repeat on reload, nothing worse
    }
  }

  private _last: IRuntimeState | null = null;
  private _seen: number | null = null;
}
