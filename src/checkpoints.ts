// The kernels that track training state and the distributed runs, their last checkpoints, and
// Checkpoint now.
import { Notification } from '@jupyterlab/apputils';

import { ICheckpointKernel, ICheckpointRequest, IDistributedRun, requestAPI } from './api';
import { PolledModel } from './polled';

export class CheckpointsModel extends PolledModel {
  kernels: ICheckpointKernel[] = [];
  runs: IDistributedRun[] = [];
  /** Kernel and run ids with a request this page sent and not yet seen complete. */
  requested = new Set<string>();

  constructor() {
    super(3000, 30000);
  }

  async refresh(): Promise<void> {
    try {
      const data = await requestAPI<{ kernels: ICheckpointKernel[]; runs?: IDistributedRun[] }>(
        'checkpoints'
      );
      this.kernels = data.kernels;
      this.runs = data.runs ?? [];
      this.error = null;
      for (const kernel of this.kernels) {
        if (!kernel.pending && !kernel.writing && !kernel.request) {
          this.requested.delete(kernel.kernel_id);
        }
      }
      for (const run of this.runs) {
        if (run.run_id && !run.pending && !run.writing && !run.request) {
          this.requested.delete(run.run_id);
        }
      }
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  async checkpointNow(kernelId: string): Promise<void> {
    await this._ask(kernelId, { kernel_id: kernelId });
  }

  /** Every rank of a distributed run saves at the step they agree on. */
  async checkpointRun(runId: string): Promise<void> {
    await this._ask(runId, { run_id: runId });
  }

  private async _ask(id: string, body: { kernel_id: string } | { run_id: string }): Promise<void> {
    this.requested.add(id);
    this._changed.emit();
    try {
      const { requests } = await requestAPI<{ requests: ICheckpointRequest[] }>('checkpoints', {
        method: 'POST',
        body: JSON.stringify(body)
      });
      const request = requests[0];
      if (request.state === 'error') {
        Notification.error(`Checkpoint failed: ${request.message}`, { autoClose: false });
      }
    } catch (error) {
      this.requested.delete(id);
      Notification.error(`Checkpoint failed: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }
}
