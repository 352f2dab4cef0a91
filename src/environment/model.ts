// The kernels' environment against its latest snapshot (polled), a snapshot or a restore
// followed to its end, and the kernels restarted onto a restored environment.
import { ServiceManager } from '@jupyterlab/services';

import { IEnvState, IJob, requestAPI } from '../api';
import { PolledModel } from '../polled';

/** Where a snapshot and a restore are started and followed. */
export type EnvironmentJob = 'env/snapshots' | 'env/restore';

export class EnvironmentModel extends PolledModel {
  state: IEnvState | null = null;
  /** The job this page started and is following. */
  job: IJob | null = null;

  constructor(private _services: ServiceManager.IManager | null) {
    super(10000, 60000);
  }

  get busy(): boolean {
    return this.job?.state === 'running';
  }

  /** How many packages a restore installs: those removed or changed since the snapshot. */
  get toRestore(): number {
    const d = this.state?.diff;
    return d ? d.removed.length + d.changed.length : 0;
  }

  /** Whether this page can restart the kernels (it has JupyterLab's services). */
  get canRestartKernels(): boolean {
    return !!this._services;
  }

  protected async load(): Promise<void> {
    this.state = await requestAPI<IEnvState>('env');
  }

  /** Start a snapshot or a restore and follow it to its end (the section shows its progress);
   * throws with the server's reason when it refuses to start. */
  async run(path: EnvironmentJob, body: string): Promise<IJob> {
    const started = await requestAPI<IJob>(path, { method: 'POST', body });
    const seen = (job: IJob) => {
      this.job = job;
      this._changed.emit();
    };
    seen(started);
    const job = await this.follow(
      started,
      500,
      current => requestAPI<IJob>(`${path}/${current.id}`),
      seen
    );
    await this.refresh();
    return job;
  }

  /** Stop the running snapshot or restore between packages. */
  async cancel(): Promise<void> {
    if (this.job?.state === 'running') {
      const path = this.job.kind === 'env-restore' ? 'env/restore' : 'env/snapshots';
      await requestAPI(`${path}/${this.job.id}`, { method: 'DELETE' });
    }
  }

  /** Restart every running kernel, so that they import what a restore installed. */
  async restartKernels(): Promise<void> {
    const kernels = this._services?.kernels;
    if (!kernels) {
      return;
    }
    await kernels.refreshRunning();
    for (const model of Array.from(kernels.running())) {
      const connection = kernels.connectTo({ model });
      await connection.restart().catch(() => undefined);
      connection.dispose();
    }
  }
}
