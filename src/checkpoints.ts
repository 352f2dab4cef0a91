// The kernels that track training state, their last checkpoint, and Checkpoint now.
import { Notification } from '@jupyterlab/apputils';

import { ICheckpointKernel, ICheckpointRequest, requestAPI } from './api';
import { PolledModel } from './polled';

export class CheckpointsModel extends PolledModel {
  kernels: ICheckpointKernel[] = [];
  /** Kernel ids with a request this page sent and not yet seen complete. */
  requested = new Set<string>();

  constructor() {
    super(3000, 30000);
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

}
