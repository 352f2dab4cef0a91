// The shape every panel model shares: a server state polled with back-off (paused while the
// page is hidden), the last look's failure until a later one succeeds, a `changed` signal,
// jobs of the server followed to their end, and disposal.
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import { IJob } from './api';
import { isUnanswered } from './reach';

/** Wait `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

export abstract class PolledModel implements IDisposable {
  /** The last look's failure, for the panel to show; cleared by the next look that succeeds. */
  error: string | null = null;
  /** The last look got no answer at all (the server is gone): the page says so once. */
  unanswered = false;

  constructor(interval: number, max = 30000) {
    this.poll = new Poll({
      // A failed look rejects, so the poll backs off (up to `max`) while the server cannot
      // answer, and comes back to `interval` after the first look that succeeds.
      factory: async () => {
        await this.refresh();
        if (this.error !== null || this.unanswered) {
          throw new Error(this.error ?? 'The server is not answering');
        }
      },
      frequency: { interval, backoff: true, max },
      standby: 'when-hidden'
    });
  }

  /** Ask the server again (the poll calls it): the new state, or the reason it could not be
   * had; then `changed`. */
  async refresh(): Promise<void> {
    try {
      await this.load();
      this.error = null;
      this.unanswered = false;
    } catch (error) {
      // The server not answering at all is said once for the whole panel (reach.ts), not by
      // every section: the section keeps its last state, greyed.
      this.unanswered = isUnanswered(error);
      this.error = this.unanswered ? null : (error as Error).message;
    }
    this._changed.emit();
  }

  /** Read the server's state into the model; throws when it cannot. */
  protected abstract load(): Promise<void>;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (!this._disposed) {
      this._disposed = true;
      this.poll.dispose();
      Signal.clearData(this);
    }
  }

  /** Follow a job of the server to its end: look again every `every` ms while it runs and this
   * model lives, each answer handed to `seen`; a look that fails ends it as failed, with why. */
  protected async follow(
    job: IJob,
    every: number,
    look: (job: IJob) => Promise<IJob>,
    seen: (job: IJob) => void
  ): Promise<IJob> {
    while (job.state === 'running' && !this.isDisposed) {
      await sleep(every);
      try {
        job = await look(job);
      } catch (error) {
        job = { ...job, state: 'failed', errors: [(error as Error).message] };
      }
      seen(job);
    }
    return job;
  }

  protected _changed = new Signal<this, void>(this);
  private _disposed = false;
  protected readonly poll: Poll;
}
