// The kernels that track training state and the distributed runs, with their last checkpoints
// (polled), and the checkpoint requests this page sent.
import {
  ICheckpointKernel,
  ICheckpointKernels,
  ICheckpointRequest,
  ICheckpointRequests,
  IDistributedRun,
  requestAPI
} from '../api';
import { PolledModel } from '../polled';

/** What a checkpoint is asked of: a notebook's kernel, or every rank of a distributed run. */
export type CheckpointTarget = { kernel_id: string } | { run_id: string };

export class CheckpointsModel extends PolledModel {
  kernels: ICheckpointKernel[] = [];
  runs: IDistributedRun[] = [];
  /** Kernel and run ids with a request this page sent and not yet seen complete. */
  requested = new Set<string>();

  constructor() {
    super(3000, 30000);
  }

  protected async load(): Promise<void> {
    const data = await requestAPI<ICheckpointKernels>('checkpoints');
    this.kernels = data.kernels;
    this.runs = data.runs ?? [];
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
  }

  /** Ask for a checkpoint at the next safe step (every rank of a run at the step they agree
   * on): the server's answer, which may be a refusal; throws when the request fails. */
  async checkpoint(target: CheckpointTarget): Promise<ICheckpointRequest> {
    const id = 'kernel_id' in target ? target.kernel_id : target.run_id;
    this.requested.add(id);
    this._changed.emit();
    try {
      const { requests } = await requestAPI<ICheckpointRequests>('checkpoints', {
        method: 'POST',
        body: JSON.stringify(target)
      });
      return requests[0];
    } catch (error) {
      this.requested.delete(id);
      throw error;
    } finally {
      await this.refresh();
    }
  }
}
