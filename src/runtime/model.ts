// The runtime's state (polled) with its countdown moving every second between two looks, and a
// release (persist, then the server stops) followed to its end.
import { IJob, IRuntimeState, requestAPI } from '../api';
import { PolledModel, sleep } from '../polled';
import { liveNow } from '../reach';
import { SyncModel } from '../sync/model';

export class RuntimeModel extends PolledModel {
  state: IRuntimeState | null = null;
  /** Set once a release has persisted everything and the server is stopping. */
  released = false;

  constructor(private _sync: SyncModel) {
    super(5000, 30000);
    // The countdown moves every second between two polls.
    this._timer = setInterval(() => {
      if (this.state?.deadline) {
        this._changed.emit();
      }
    }, 1000);
  }

  dispose(): void {
    clearInterval(this._timer);
    super.dispose();
  }

  /** The server's "now", estimated from its last answer and the time since. */
  now(): number {
    return liveNow() + this._offset; // held while the server does not answer
  }

  /** Seconds left before the earliest deadline, or null when there is none. */
  remaining(): number | null {
    const deadline = this.state?.deadline;
    return deadline ? Math.max(0, deadline - this.now()) : null;
  }

  protected async load(): Promise<void> {
    const state = await requestAPI<IRuntimeState>('runtime');
    this._offset = state.now - Date.now() / 1000;
    this.state = state;
  }

  /** Ask the server to persist everything, then stop; throws with its reason. */
  startRelease(): Promise<IJob> {
    return requestAPI<IJob>('runtime/release', { method: 'POST', body: '{}' });
  }

  /** Follow a release until the server says it is going, or is gone ('released': then nothing
   * more is asked of it, nor of the sync), or keeps running because the persist failed ('kept',
   * the reason in the state's release). */
  async followRelease(): Promise<'released' | 'kept'> {
    for (;;) {
      await sleep(500);
      let state: IRuntimeState;
      try {
        state = await requestAPI<IRuntimeState>('runtime');
      } catch {
        break; // the server has stopped
      }
      this.state = state;
      this._changed.emit();
      if (state.release?.state === 'kept') {
        return 'kept';
      }
      if (state.release?.state === 'releasing') {
        break;
      }
    }
    this.released = true;
    this._changed.emit();
    this.dispose(); // nothing more to ask a server that is stopping
    this._sync.finish();
    return 'released';
  }

  private _timer: ReturnType<typeof setInterval>;
  private _offset = 0;
}
