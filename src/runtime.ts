// The runtime's countdown (polled, ticking locally each second), its notices shown once as
// notifications with a Persist now action, and Persist and release.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { IJob, IRuntimeState, requestAPI } from './api';
import { PolledModel } from './polled';
import { Level, SyncModel } from './sync';
import { deadlineSource, timeLeft, WORDS } from './vocabulary';

export class RuntimeModel extends PolledModel {
  state: IRuntimeState | null = null;

  constructor(private _sync: SyncModel) {
    super(5000, 30000);
    // The countdown moves every second between two polls.
    this._timer = window.setInterval(() => {
      if (this.state?.deadline) {
        this._changed.emit();
      }
    }, 1000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  /** The server's "now", estimated from its last answer and the time since. */
  now(): number {
    return Date.now() / 1000 + this._offset;
  }

  /** Seconds left before the earliest deadline, or null when there is none. */
  remaining(): number | null {
    const deadline = this.state?.deadline;
    return deadline ? Math.max(0, deadline - this.now()) : null;
  }

  async refresh(): Promise<void> {
    try {
      const state = await requestAPI<IRuntimeState>('runtime');
      this._offset = state.now - Date.now() / 1000;
      this.state = state;
      this.error = null;
      this._announce(state);
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  /** Persist, then shut the server down (after the user confirms). */
  async release(): Promise<void> {
    const answer = await showDialog({
      title: 'Persist and release this runtime?',
      body:
        'Everything is checkpointed and uploaded to the store, then the server shuts down so a ' +
        'paid runtime stops. If the persist fails, the server keeps running.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Persist and release' })]
    });
    if (!answer.button.accept) {
      return;
    }
    let job: IJob;
    try {
      job = await requestAPI<IJob>('runtime/release', { method: 'POST', body: '{}' });
    } catch (error) {
      Notification.error(`Release failed: ${(error as Error).message}`, { autoClose: false });
      return;
    }
    const note = Notification.emit('Persisting before the release…', 'in-progress', {
      autoClose: false
    });
    // Follow the release until the server says it is going, or is gone.
    for (;;) {
      await new Promise(resolve => setTimeout(resolve, 500));
      let state: IRuntimeState;
      try {
        state = await requestAPI<IRuntimeState>('runtime');
      } catch {
        break; // the server has stopped
      }
      this.state = state;
      this._changed.emit();
      if (state.release?.state === 'kept') {
        Notification.update({
          id: note,
          type: 'error',
          message: `Not released: the persist failed (${state.release.error}). The server keeps running.`,
          autoClose: false
        });
        return;
      }
      if (state.release?.state === 'releasing') {
        break;
      }
    }
    this.released = true;
    this._changed.emit();
    this.dispose(); // nothing more to ask a server that is stopping
    this._sync.finish();
    Notification.update({
      id: note,
      type: 'success',
      message: `Released: everything was persisted (job ${job.id}) and the server is stopping. You can close this tab.`,
      autoClose: false
    });
  }

  /** Set once a release has persisted everything and the server is stopping. */
  released = false;

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
      const left = this.remaining();
      const message =
        old && left !== null
          ? `This runtime ends in about ${minutes(left)}. Persist now to keep your work.`
          : notice.message;
      const actions =
        notice.level === 'warning'
          ? [{ label: 'Persist now', callback: () => void this._sync.persist() }]
          : [];
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

  private _timer: number;
  private _offset = 0;
  private _seen: number | null = null;
}

/** The few words the status bar and the panel's header say about the time left: "24 min left",
 * amber from 10 minutes, red from 2. */
export function runtimeWord(model: RuntimeModel): { text: string; title: string; level: Level } {
  if (model.released) {
    return {
      text: WORDS.runtime.released,
      title: 'This runtime was released: the server has stopped',
      level: 'none'
    };
  }
  const state = model.state;
  const left = model.remaining();
  if (!state || left === null) {
    return { text: '', title: '', level: 'none' };
  }
  const level: Level = left <= 120 ? 'error' : left <= 600 ? 'warning' : 'ok';
  const ends = new Date((state.deadline ?? 0) * 1000).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit'
  });
  return {
    text: timeLeft(left),
    title: `The runtime ends at ${ends} (${deadlineSource(state.source)})`,
    level
  };
}

function minutes(seconds: number): string {
  const m = Math.max(1, Math.round(seconds / 60));
  return `${m} minute${m === 1 ? '' : 's'}`;
}
