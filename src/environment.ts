// The kernels' environment against its latest snapshot (polled), Snapshot now, and Restore
// environment followed to its end, then the offer to restart the kernels.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ServiceManager } from '@jupyterlab/services';

import { IEnvState, IJob, requestAPI } from './api';
import { PolledModel } from './polled';

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

  async refresh(): Promise<void> {
    try {
      this.state = await requestAPI<IEnvState>('env');
      this.error = null;
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  async snapshot(): Promise<void> {
    const job = await this._follow('env/snapshots', '{}', 'Taking an environment snapshot…');
    if (job?.state === 'done') {
      const env = job.result.environment;
      Notification.success(
        env?.new ? `Environment snapshot ${env.id} kept in the store` : 'The environment has not changed since the last snapshot',
        { autoClose: 5000 }
      );
    }
  }

  /** Install what differs from the latest snapshot; offers to restart the kernels after. */
  async restore(): Promise<void> {
    const d = this.state?.diff;
    const count = d ? d.removed.length + d.changed.length : 0;
    const answer = await showDialog({
      title: 'Restore the environment?',
      body:
        `${count} package${count === 1 ? '' : 's'} will be installed as in the snapshot, from the store's ` +
        'wheels first. Nothing is uninstalled. Running kernels keep the old versions until restarted.',
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Restore' })]
    });
    if (!answer.button.accept) {
      return;
    }
    const job = await this._follow('env/restore', '{}', 'Restoring the environment…');
    if (!job) {
      return;
    }
    const report = job.result.restore ?? { installed: [], failed: [] };
    const failed = report.failed.map((f: { name: string }) => f.name);
    const message =
      `Environment restored: ${report.installed.length} installed` +
      (failed.length ? `, failed: ${failed.join(', ')}` : '') +
      '. Restart the kernels to use it.';
    Notification.emit(message, failed.length || job.state !== 'done' ? 'warning' : 'success', {
      autoClose: false,
      actions: this._services
        ? [{ label: 'Restart kernels', callback: () => void this._restartKernels() }]
        : []
    });
  }

  async cancel(): Promise<void> {
    if (this.job?.state === 'running') {
      const path = this.job.kind === 'env-restore' ? 'env/restore' : 'env/snapshots';
      await requestAPI(`${path}/${this.job.id}`, { method: 'DELETE' });
    }
  }

  private async _follow(path: string, body: string, label: string): Promise<IJob | null> {
    let job: IJob;
    try {
      job = await requestAPI<IJob>(path, { method: 'POST', body });
    } catch (error) {
      Notification.error(`${label.replace('…', '')} failed: ${(error as Error).message}`, {
        autoClose: false
      });
      return null;
    }
    this.job = job;
    this._changed.emit();
    while (job.state === 'running' && !this.isDisposed) {
      await new Promise(resolve => setTimeout(resolve, 500));
      try {
        job = await requestAPI<IJob>(`${path}/${job.id}`);
      } catch (error) {
        job = { ...job, state: 'failed', errors: [(error as Error).message] };
      }
      this.job = job;
      this._changed.emit();
    }
    if (job.state === 'failed' && job.kind === 'env-snapshot') {
      Notification.error(`Snapshot failed: ${job.errors.join('; ')}`, { autoClose: false });
    }
    await this.refresh();
    return job;
  }

  private async _restartKernels(): Promise<void> {
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
    Notification.success('Kernels restarted', { autoClose: 3000 });
  }

}
