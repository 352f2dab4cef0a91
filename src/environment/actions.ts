// What the user can do to the environment, with its confirmation and notifications: Snapshot
// now, Restore environment (a dialog that says what it will do, then the offer to restart the
// kernels); and whether each can run now, or why not.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { IEnvSource, IJob } from '../api';
import { can, cannot, IAction } from '../action';
import { count, WORDS } from '../vocabulary';
import { EnvironmentJob, EnvironmentModel } from './model';

const ACTIONS = WORDS.actions;

export function snapshotAction(environment: EnvironmentModel): IAction {
  const env = environment.state;
  if (environment.busy) {
    return cannot('A snapshot or a restore of the environment is running');
  }
  if (!env || env.state === 'capturing') {
    return cannot('Reading the environment…');
  }
  return can(
    `${ACTIONS.snapshot}: keep the environment's package list (and wheels of what no index has) in the store`
  );
}

export function restoreEnvironmentAction(environment: EnvironmentModel): IAction {
  const env = environment.state;
  const d = env?.diff;
  if (environment.busy) {
    return cannot('A snapshot or a restore of the environment is running');
  }
  if (!env || env.state === 'capturing') {
    return cannot('Reading the environment…');
  }
  if (env.state === 'error') {
    return cannot('Cannot read the environment (see the Environment section)');
  }
  if (env.state === 'no-snapshot' || !d) {
    return cannot(
      'Nothing to restore: the store has no usable snapshot yet (Snapshot now takes one)'
    );
  }
  if (environment.toRestore === 0) {
    return cannot(
      d.added.length
        ? 'Nothing to restore: only packages added since the snapshot (a restore installs, it never uninstalls)'
        : 'Nothing to restore: the environment matches the snapshot'
    );
  }
  return can(
    `${ACTIONS.restore_environment}: install the ${count(environment.toRestore, 'package')} that differ from the snapshot, from the store's wheels first`
  );
}

/** The restore dialog's body: what will happen, and, where packages would be fetched and built
 * from VCS or URL sources, each source listed beside the checkbox that allows it (unchecked: the
 * server refuses such a restore and says which). Text only: nothing from a snapshot is markup. */
export class RestoreDialogBody extends Widget {
  constructor(packages: number, sources: IEnvSource[]) {
    super();
    this.addClass('jp-gpuws-env-restore-dialog');
    const intro = document.createElement('p');
    intro.textContent =
      `${count(packages, 'package')} will be installed as in the snapshot, from the store's ` +
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
        ` Also fetch and build ${count(sources.length, 'package')} from ` +
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

/** Snapshot now: keep the environment's package list in the store; the outcome in a
 * notification. */
export async function snapshot(environment: EnvironmentModel): Promise<void> {
  const job = await runJob(environment, 'env/snapshots', '{}', 'Taking an environment snapshot');
  if (job?.state === 'done') {
    const env = job.result.environment;
    Notification.success(
      env?.new
        ? `Environment snapshot ${env.id} kept in the store`
        : 'The environment has not changed since the last snapshot',
      { autoClose: 5000 }
    );
  } else if (job?.state === 'failed') {
    Notification.error(`Snapshot failed: ${job.errors.join('; ')}`, { autoClose: false });
  }
}

/** Install what differs from the latest snapshot (after the user confirms); offers to restart
 * the kernels after. */
export async function restore(environment: EnvironmentModel): Promise<void> {
  const answer = await showDialog({
    title: 'Restore the environment?',
    body: new RestoreDialogBody(environment.toRestore, environment.state?.sources ?? []),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Restore' })]
  });
  if (!answer.button.accept) {
    return;
  }
  const body = JSON.stringify({ allow_sources: answer.value?.allowSources ?? false });
  const job = await runJob(environment, 'env/restore', body, 'Restoring the environment');
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
    actions: environment.canRestartKernels
      ? [{ label: 'Restart kernels', callback: () => void restartKernels(environment) }]
      : []
  });
}

/** A snapshot or a restore to its end, or null when the server refused it (said in a
 * notification). */
async function runJob(
  environment: EnvironmentModel,
  path: EnvironmentJob,
  body: string,
  label: string
): Promise<IJob | null> {
  try {
    return await environment.run(path, body);
  } catch (error) {
    Notification.error(`${label} failed: ${(error as Error).message}`, { autoClose: false });
    return null;
  }
}

async function restartKernels(environment: EnvironmentModel): Promise<void> {
  await environment.restartKernels();
  Notification.success('Kernels restarted', { autoClose: 3000 });
}
