// The kernels' environment against its latest snapshot (polled), Snapshot now, and Restore
// environment followed to its end, then the offer to restart the kernels.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ServiceManager } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { IEnvSource, IEnvState, IJob, requestAPI } from './api';
import { PolledModel } from './polled';

/** The restore dialog's body: what will happen, and, where packages would be fetched and built
 * from VCS or URL sources, each source listed beside the checkbox that allows it (unchecked: the
 * server refuses such a restore and says which). Text only: nothing from a snapshot is markup. */
export class RestoreDialogBody extends Widget {
  constructor(count: number, sources: IEnvSource[]) {
    super();
    this.addClass('jp-gpuws-env-restore-dialog');
    const intro = document.createElement('p');
    intro.textContent =
      `${count} package${count === 1 ? '' : 's'} will be installed as in the snapshot, from the store's ` +
      'wheels first. Nothing is uninstalled. Running kernels keep the old versions until restarted.';
    this.node.appendChild(intro);
    if (!sources.length) {
      return;
    }
    const label = document.createElement('label');
    label.className = 'jp-gpuws-env-allow-sources';
    this._checkbox = document.createElement('input');
    this._checkbox.type = 'checkbox';
    this._checkbox.setAttribute('data-testid', 'gpuws-env-allow-sources');
    label.appendChild(this._checkbox);
    label.appendChild(
      document.createTextNode(
        ` Also fetch and build ${sources.length} package${sources.length === 1 ? '' : 's'} from ` +
          'these sources (their build code runs on this machine):'
      )
    );
    this.node.appendChild(label);
    const list = document.createElement('ul');
    list.className = 'jp-gpuws-env-sources';
    for (const source of sources) {
      const item = document.createElement('li');
      item.textContent = `${source.name} ${source.version}: ${source.source}`;
      list.appendChild(item);
    }
    this.node.appendChild(list);
  }

  getValue(): { allowSources: boolean } {
    return { allowSources: this._checkbox?.checked ?? false };
  }

  private _checkbox: HTMLInputElement | null = null;
}

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
        env?.new
          ? `Environment snapshot ${env.id} kept in the store`
          : 'The environment has not changed since the last snapshot',
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
      body: new RestoreDialogBody(count, this.state?.sources ?? []),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Restore' })]
    });
    if (!answer.button.accept) {
      return;
    }
    const body = JSON.stringify({ allow_sources: answer.value?.allowSources ?? false });
    const job = await this._follow('env/restore', body, 'Restoring the environment…');
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
