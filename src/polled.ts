// The shape every panel model shares: a server state polled with back-off (paused while the
// page is hidden), a `changed` signal, and disposal.
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

export abstract class PolledModel implements IDisposable {
  /** The last refresh's failure, for the panel to show. */
  error: string | null = null;

  constructor(interval: number, max = 30000) {
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval, backoff: true, max },
      standby: 'when-hidden'
    });
  }

  /** Ask the server again (the poll calls it); emit `changed` when done. */
  abstract refresh(): Promise<void>;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (!this._disposed) {
      this._disposed = true;
      this._poll.dispose();
      Signal.clearData(this);
    }
  }

  protected _changed = new Signal<this, void>(this);
  private _disposed = false;
  private _poll: Poll;
}
