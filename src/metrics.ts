// The browser's copy of the monitor: the latest sample and a bounded history, kept live
// from the server's websocket stream (with REST to catch up after a reconnect).
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import {
  IMetricsWithHistory,
  ISample,
  metricsStreamUrl,
  requestAPI
} from './api';

export type ConnectionState = 'connecting' | 'live' | 'reconnecting';

const MAX_BACKOFF_MS = 30000;

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
    Signal.clearData(this);
  }

  private async _catchUp(): Promise<void> {
    const since = this.latest ? this.latest.time : 0;
    try {
      const data = await requestAPI<IMetricsWithHistory>(
        `metrics?since=${since}`
      );
      for (const sample of data.history) {
        this._add(sample, false);
      }
      this._add(data, false);
      this.error = null;
    } catch (error) {
      this.error = `Cannot reach the GPU workspace server: ${(error as Error).message}`;
    }
    this._changed.emit();
  }

  private _open(): void {
    if (this._disposed) {
      return;
    }
    const socket = new WebSocket(metricsStreamUrl());
    this._socket = socket;
    socket.onopen = () => {
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
      this.connection = 'reconnecting';
      this._changed.emit();
      this._retryTimer = window.setTimeout(async () => {
        await this._catchUp();
        this._open();
      }, this._backoff);
      this._backoff = Math.min(this._backoff * 2, MAX_BACKOFF_MS);
    };
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
}
