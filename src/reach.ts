// Whether the server answers at all: one fact for the whole page, learnt from every request.
// While it does not, the panel says so once, greys the figures it shows (they are the server's
// last) and holds the clocks that count down or up from them.
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

export class ServerReach {
  /** When (ms since the epoch) the server stopped answering; null while it answers. */
  since: number | null = null;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** A request got no answer from the server. */
  lost(): void {
    if (this.since === null) {
      this.since = Date.now();
      this._changed.emit();
    }
  }

  /** The server answered (an error of its own included). */
  answered(): void {
    if (this.since !== null) {
      this.since = null;
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
}

export const serverReach = new ServerReach();

/** Now, in seconds since the epoch, for figures that count time: held where it was when the
 * server stopped answering (what the page shows is then the server's last word, not live). */
export function liveNow(): number {
  return (serverReach.since ?? Date.now()) / 1000;
}

/** Whether `error` is the server not answering (the request failed on its way: the server is
 * gone, the network down; or a proxy in front of it could not reach it), as opposed to an
 * error the server answered. */
export function isUnanswered(error: unknown): boolean {
  return error instanceof ServerConnection.NetworkError;
}
