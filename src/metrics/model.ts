// The browser's copy of the monitor: the latest sample and a bounded history, kept live
// from the server's websocket stream (with REST to catch up after a reconnect).
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import { IMetricsWithHistory, ISample, metricsStreamUrl, requestAPI } from '../api';
import { isUnanswered } from '../reach';

/** 'polling': websockets fail here (a proxy that blocks them), so samples come by REST. */
export type ConnectionState = 'connecting' | 'live' | 'reconnecting' | 'polling';

const MAX_BACKOFF_MS = 30000;
/** Failed websocket attempts in a row before falling back to polling. */
const ATTEMPTS_BEFORE_POLLING = 3;

export class MetricsModel implements IDisposable {
  /** Samples kept for sparklines, oldest first. */
  history: ISample[] = [];
  latest: ISample | null = null;
  connection: ConnectionState = 'connecting';
  error: string | null = null;
  /** Seconds of history the browser keeps (the server keeps its own, maybe longer). */
  historySeconds = 300;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Load the history, then follow the stream. Safe to call once. */
  async start(): Promise<void> {
    await this._catchUp();
    this._open();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._retryTimer);
    this._socket?.close();
    this._poll?.dispose();
    Signal.clearData(this);
  }

  private async _catchUp(): Promise<void> {
    // Only the samples not seen yet; all the server keeps on the first call.
    const since = this.latest ? this.latest.time : 0;
    try {
      const data = await requestAPI<IMetricsWithHistory>(`metrics?since=${since}`);
      for (const sample of data.history) {
        this._add(sample, false);
      }
      this._add(data, false);
      this.error = null;
      this._unanswered = false;
    } catch (error) {
      // The server not answering at all is said once for the whole panel (reach.ts).
      this.error = isUnanswered(error)
        ? null
        : `Cannot reach the GPU workspace server: ${(error as Error).message}`;
      this._unanswered = isUnanswered(error);
    }
    this._changed.emit();
  }

  private _open(): void {
    if (this._disposed) {
      return;
    }
    const socket = new WebSocket(metricsStreamUrl());
    this._socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this._failures = 0;
      this._backoff = 1000;
      this.connection = 'live';
      this.error = null;
      this._changed.emit();
    };
    socket.onmessage = event => {
      this._add(JSON.parse(event.data) as ISample, true);
    };
    socket.onclose = () => {
      if (this._disposed) {
        return;
      }
      this._failures = opened ? 0 : this._failures + 1;
      if (this._failures >= ATTEMPTS_BEFORE_POLLING) {
        this._startPolling();
        return;
      }
      this.connection = 'reconnecting';
      this._changed.emit();
      this._retryTimer = window.setTimeout(async () => {
        await this._catchUp();
        this._open();
      }, this._backoff);
      this._backoff = Math.min(this._backoff * 2, MAX_BACKOFF_MS);
    };
  }

  private _startPolling(): void {
    this.connection = 'polling';
    this._changed.emit();
    const interval = Math.max((this.latest?.interval ?? 1) * 1000, 1000);
    this._poll = new Poll({
      factory: async () => {
        const wasDown = this._unanswered;
        await this._catchUp();
        if (this.error || this._unanswered) {
          throw new Error(this.error ?? 'The server is not answering');
        }
        if (wasDown) {
          // The server is back (it was away, not refusing websockets): the stream again.
          window.setTimeout(() => this._reopen(), 0);
        }
      },
      frequency: { interval, backoff: true, max: MAX_BACKOFF_MS },
      standby: 'when-hidden'
    });
  }

  private _reopen(): void {
    if (this._disposed || !this._poll) {
      return;
    }
    this._poll.dispose();
    this._poll = null;
    this._failures = 0;
    this.connection = 'connecting';
    this._changed.emit();
    this._open();
  }

  private _add(sample: ISample, emit: boolean): void {
    if (this.latest && sample.time <= this.latest.time) {
      return;
    }
    this.latest = sample;
    this.history.push(sample);
    const oldest = sample.time - this.historySeconds;
    while (this.history.length && this.history[0].time < oldest) {
      this.history.shift();
    }
    if (emit) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _disposed = false;
  private _socket: WebSocket | null = null;
  private _backoff = 1000;
  private _retryTimer = 0;
  private _failures = 0;
  private _poll: Poll | null = null;
  private _unanswered = false;
}
