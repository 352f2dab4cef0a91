// The kernels that track training state, their last checkpoint, and Checkpoint now.
import { Notification } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { IDisposable } from '@lumino/disposable';

import { ICheckpointKernel, ICheckpointRequest, requestAPI } from './api';

export class CheckpointsModel implements IDisposable {
  kernels: ICheckpointKernel[] = [];
  error: string | null = null;
  /** Kernel ids with a request this page sent and not yet seen complete. */
  requested = new Set<string>();

  constructor() {
    this._poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: 3000, backoff: true, max: 30000 },
      standby: 'when-hidden'
    });
  }

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

  async refresh(): Promise<void> {
    try {
      const data = await requestAPI<{ kernels: ICheckpointKernel[] }>('checkpoints');
      this.kernels = data.kernels;
      this.error = null;
      for (const kernel of this.kernels) {
        if (!kernel.pending && !kernel.writing && !kernel.request) {
          this.requested.delete(kernel.kernel_id);
        }
      }
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  async checkpointNow(kernelId: string): Promise<void> {
    this.requested.add(kernelId);
    this._changed.emit();
    try {
      const { requests } = await requestAPI<{ requests: ICheckpointRequest[] }>('checkpoints', {
        method: 'POST',
        body: JSON.stringify({ kernel_id: kernelId })
      });
      const request = requests[0];
      if (request.state === 'error') {
        Notification.error(`Checkpoint failed: ${request.message}`, { autoClose: false });
      }
    } catch (error) {
      this.requested.delete(kernelId);
      Notification.error(`Checkpoint failed: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }

  private _changed = new Signal<this, void>(this);
  private _disposed = false;
  private _poll: Poll;
}
