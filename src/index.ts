import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, IThemeManager, Notification, WidgetTracker } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { historyIcon, MenuSvg, settingsIcon } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { VirtualElement } from '@lumino/virtualdom';
import { Menu } from '@lumino/widgets';

import { IAction } from './action';
import { CheckpointsModel } from './checkpoints/model';
import { TrainingDashboard } from './dashboard/Dashboard';
import { DocumentSaver } from './documents';
import { restore, restoreEnvironmentAction, snapshot, snapshotAction } from './environment/actions';
import { EnvironmentModel } from './environment/model';
import { gpuIcon, persistIcon, snapshotIcon } from './icons';
import { runAsJob } from './jobs/actions';
import { JobsModel } from './jobs/model';
import { MetricsModel } from './metrics/model';
import { AlertNotifier } from './metrics/notices';
import { release, releaseAction } from './runtime/actions';
import { RuntimeModel } from './runtime/model';
import { RuntimeNotifier } from './runtime/notices';
import { GpuWorkspacePanel } from './sidebar/Panel';
import { SectionMemory } from './sidebar/Section';
import { jobsSection, trainingSection } from './sidebar/sections';
import { GpuStatusItem, TrainingStatusItem } from './statusbar';
import { persist, persistAction, takeOver, takeOverAction } from './sync/actions';
import { SyncModel } from './sync/model';
import { TrainingHistoryModel, TrainingModel } from './training/model';
import { TrainingNotifier } from './training/notices';
import { WORDS } from './vocabulary';

const PLUGIN_ID = 'jupyter_gpu_ws:plugin';

namespace CommandIDs {
  export const openPanel = 'gpuws:open-panel';
  export const persist = 'gpuws:persist';
  export const release = 'gpuws:persist-and-release';
  export const snapshot = 'gpuws:env-snapshot';
  export const restoreEnvironment = 'gpuws:env-restore';
  export const takeOver = 'gpuws:take-over';
  export const settings = 'gpuws:open-settings';
  export const openDashboard = 'gpuws:open-training-dashboard';
  export const runAsJob = 'gpuws:run-as-job';
  export const runNotebookAsJob = 'gpuws:run-notebook-as-job';
}

/** A menu whose items show their command's caption as a tooltip, so a greyed-out item says why. */
class CaptionedMenuRenderer extends MenuSvg.Renderer {
  renderItem(data: Menu.IRenderData): VirtualElement {
    const item = super.renderItem(data);
    const caption = data.item.caption;
    return caption
      ? new VirtualElement(
          item.tag,
          { ...item.attrs, title: caption },
          item.children,
          item.renderer
        )
      : item;
  }
}

/** A command whose enabled state and caption come from an action's answer. */
function actionCommand(
  label: string,
  action: () => IAction,
  execute: () => unknown,
  icon?: CommandRegistry.ICommandOptions['icon']
): CommandRegistry.ICommandOptions {
  return {
    label,
    caption: () => action().tooltip,
    icon,
    isEnabled: () => action().enabled,
    execute
  };
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU Workspace: GPU and system monitor, storage sync and Persist now.',
  autoStart: true,
  optional: [
    ISettingRegistry,
    ILayoutRestorer,
    ICommandPalette,
    IStatusBar,
    IDocumentManager,
    IStateDB,
    IThemeManager,
    IDefaultFileBrowser
  ],
  activate: async (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    docManager: IDocumentManager | null,
    state: IStateDB | null,
    themeManager: IThemeManager | null,
    fileBrowser: IDefaultFileBrowser | null
  ) => {
    // Every page (JupyterLab, and each Notebook 7 page) saves its own open documents when any
    // persist asks: Persist now from any browser, the automatic persist, the release.
    if (docManager) {
      new DocumentSaver(app, docManager).start();
    }

    const model = new MetricsModel();
    const sync = new SyncModel();
    const checkpoints = new CheckpointsModel();
    const runtime = new RuntimeModel(sync);
    new RuntimeNotifier(runtime, () => void persist(sync));
    const environment = new EnvironmentModel(app.serviceManager);
    const actions = WORDS.actions;
    const { commands } = app;

    commands.addCommand(
      CommandIDs.persist,
      actionCommand(
        actions.persist,
        () => persistAction(sync),
        () => persist(sync),
        persistIcon
      )
    );
    commands.addCommand(
      CommandIDs.release,
      actionCommand(
        `${actions.release}…`,
        () => releaseAction(runtime),
        () => release(runtime)
      )
    );
    commands.addCommand(
      CommandIDs.snapshot,
      actionCommand(
        actions.snapshot,
        () => snapshotAction(environment),
        () => snapshot(environment),
        snapshotIcon
      )
    );
    commands.addCommand(
      CommandIDs.restoreEnvironment,
      actionCommand(
        `${actions.restore_environment}…`,
        () => restoreEnvironmentAction(environment),
        () => restore(environment),
        historyIcon
      )
    );
    commands.addCommand(
      CommandIDs.takeOver,
      actionCommand(
        `${actions.take_over}…`,
        () => takeOverAction(sync),
        () => takeOver(sync)
      )
    );
    commands.addCommand(CommandIDs.settings, {
      label: `${actions.settings}…`,
      caption: 'GPU Workspace settings in the Settings Editor: status bar, alerts, sparklines',
      icon: settingsIcon,
      isEnabled: () => commands.hasCommand('settingeditor:open'),
      execute: () => commands.execute('settingeditor:open', { query: 'GPU Workspace' })
    });
    // The menu and the palette follow the models: enabled or not, and why.
    const follow = (ids: string[]) => () => ids.forEach(id => commands.notifyCommandChanged(id));
    sync.changed.connect(follow([CommandIDs.persist, CommandIDs.takeOver]));
    runtime.changed.connect(follow([CommandIDs.release]));
    environment.changed.connect(follow([CommandIDs.snapshot, CommandIDs.restoreEnvironment]));

    const menu = new MenuSvg({ commands, renderer: new CaptionedMenuRenderer() });
    menu.addClass('jp-gpuws-menu');
    menu.addItem({ command: CommandIDs.release });
    menu.addItem({ command: CommandIDs.snapshot });
    menu.addItem({ command: CommandIDs.takeOver });
    menu.addItem({ type: 'separator' });
    menu.addItem({ command: CommandIDs.settings });

    const memory = new SectionMemory(state);
    const panel = new GpuWorkspacePanel(
      { metrics: model, sync, checkpoints, runtime, environment },
      { sparklineSeconds: 300 },
      memory,
      menu
    );
    app.shell.add(panel, 'left', { rank: 850 });
    if (restorer) {
      restorer.add(panel, 'gpuws-panel');
    }

    const openPanel = () => {
      app.shell.activateById(panel.id);
    };
    commands.addCommand(CommandIDs.openPanel, {
      label: 'Open GPU Workspace panel',
      caption: 'Show the GPUs, the runtime left, the sync, checkpoints and the environment',
      icon: gpuIcon,
      execute: openPanel
    });
    for (const command of [
      CommandIDs.openPanel,
      CommandIDs.persist,
      CommandIDs.release,
      CommandIDs.snapshot,
      CommandIDs.restoreEnvironment,
      CommandIDs.takeOver
    ]) {
      palette?.addItem({ command, category: 'GPU Workspace' });
    }

    // Training in view: the runs (polled), their anomalies as notifications, the status bar's
    // words, the panel's Training section at the top, and the "Training and GPUs" dashboard in
    // the main area (restored on reload).
    const training = new TrainingModel();
    const dashboards = new WidgetTracker<TrainingDashboard>({ namespace: 'gpuws-training' });
    const openDashboard = () => {
      let dashboard = dashboards.find(() => true) ?? null;
      if (!dashboard || dashboard.isDisposed) {
        dashboard = new TrainingDashboard(training, new TrainingHistoryModel(), model);
        void dashboards.add(dashboard);
        app.shell.add(dashboard, 'main');
      }
      app.shell.activateById(dashboard.id);
    };
    commands.addCommand(CommandIDs.openDashboard, {
      label: 'Open Training and GPUs',
      caption:
        'Loss and scalars of each tracked run over steps, GPU utilisation and memory over time',
      icon: gpuIcon,
      execute: openDashboard
    });
    if (restorer) {
      void restorer.restore(dashboards, {
        command: CommandIDs.openDashboard,
        name: () => 'gpuws-training'
      });
    }
    themeManager?.themeChanged.connect(() => dashboards.forEach(d => d.themeChanged()));
    new TrainingNotifier(training, openDashboard);
    panel.addSection(trainingSection(training, openDashboard));
    palette?.addItem({ command: CommandIDs.openDashboard, category: 'GPU Workspace' });
    if (statusBar) {
      statusBar.registerStatusItem(`${PLUGIN_ID}:training`, {
        item: new TrainingStatusItem(training, openDashboard),
        align: 'left',
        rank: 51,
        isActive: () => training.runs.some(r => r.live),
        activeStateChanged: training.changed
      });
    }

    // Jobs: the panel's Jobs section, and "Run as job" for a notebook or a Python script (the file
    // browser's context menu; the palette for the notebook open in front). The server runs it,
    // not this page.
    const jobs = new JobsModel();
    panel.addSection(jobsSection(jobs));
    const selectedRunnable = (): string[] =>
      fileBrowser
        ? [...fileBrowser.selectedItems()]
            .filter(
              item =>
                item.type === 'notebook' || (item.type === 'file' && item.path.endsWith('.py'))
            )
            .map(item => item.path)
        : [];
    commands.addCommand(CommandIDs.runAsJob, {
      label: 'Run as job',
      caption:
        'Run the notebook or script (python NAME, in its folder) on the server as a job: it goes on without this page, and is relaunched from its checkpoint on the next runtime',
      icon: gpuIcon,
      isVisible: () => selectedRunnable().length > 0,
      execute: async () => {
        for (const path of selectedRunnable()) {
          await runAsJob(jobs, path, openPanel);
        }
      }
    });
    for (const fileType of ['notebook', 'python']) {
      app.contextMenu.addItem({
        command: CommandIDs.runAsJob,
        selector: `.jp-DirListing-item[data-file-type="${fileType}"]`,
        rank: 3
      });
    }
    const currentNotebook = () => {
      const widget = app.shell.currentWidget;
      const context = widget && docManager ? docManager.contextForWidget(widget) : undefined;
      return context && context.path.endsWith('.ipynb') ? context : null;
    };
    commands.addCommand(CommandIDs.runNotebookAsJob, {
      label: 'Run notebook as job',
      caption:
        'Save the notebook in front and run it on the server as a job, its outputs written into a copy beside it',
      icon: gpuIcon,
      isEnabled: () => currentNotebook() !== null,
      execute: async () => {
        const context = currentNotebook();
        if (!context) {
          return;
        }
        // The job runs the file: what the user sees in front must be in it.
        if (context.model.dirty) {
          try {
            await context.save();
          } catch (error) {
            Notification.error(
              `Cannot run ${context.path} as a job: it could not be saved (${(error as Error).message})`,
              {
                autoClose: false
              }
            );
            return;
          }
        }
        await runAsJob(jobs, context.path, openPanel);
      }
    });
    palette?.addItem({ command: CommandIDs.runNotebookAsJob, category: 'GPU Workspace' });

    const notifier = new AlertNotifier(model, openPanel);
    let showStatusBar = true;
    if (statusBar) {
      statusBar.registerStatusItem(PLUGIN_ID, {
        item: new GpuStatusItem(model, sync, runtime, openPanel),
        align: 'left',
        rank: 50,
        isActive: () => showStatusBar,
        activeStateChanged: model.changed
      });
    }

    if (settingRegistry) {
      try {
        const settings = await settingRegistry.load(PLUGIN_ID);
        const apply = () => {
          const seconds = settings.get('sparklineMinutes').composite as number;
          model.historySeconds = Math.max(seconds * 60, 60);
          panel.configure({ sparklineSeconds: seconds * 60 });
          notifier.enabled = settings.get('alertNotifications').composite as boolean;
          // The status bar re-reads isActive on the next sample.
          showStatusBar = settings.get('showStatusBar').composite as boolean;
        };
        apply();
        settings.changed.connect(apply);
      } catch (reason) {
        console.error('jupyter_gpu_ws: failed to load settings.', reason);
      }
    }

    void model.start();
  }
};

export default plugin;
