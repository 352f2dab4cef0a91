import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IThemeManager, WidgetTracker } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { AlertNotifier } from './alerts';
import { DocumentSaver } from './documents';
import { gpuIcon } from './icons';
import { MetricsModel } from './metrics';
import { GpuWorkspacePanel } from './sidebar/Panel';
import { GpuStatusItem } from './statusbar';
import { SyncModel } from './sync';
import { CheckpointsModel } from './checkpoints';
import { EnvironmentModel } from './environment';
import { RuntimeModel } from './runtime';
import { TrainingDashboard, TrainingHistoryModel } from './dashboard/Dashboard';
import { TrainingModel, TrainingNotifier } from './training';
import { TrainingStatusItem } from './trainingStatus';

const PLUGIN_ID = 'jupyter_gpu_ws:plugin';

namespace CommandIDs {
  export const openPanel = 'gpuws:open-panel';
  export const persist = 'gpuws:persist';
  export const release = 'gpuws:persist-and-release';
  export const openDashboard = 'gpuws:open-training-dashboard';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU Workspace: GPU and system monitor, storage sync and Persist now.',
  autoStart: true,
  optional: [ISettingRegistry, ILayoutRestorer, ICommandPalette, IStatusBar, IDocumentManager, IThemeManager],
  activate: async (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    docManager: IDocumentManager | null,
    themeManager: IThemeManager | null
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
    const environment = new EnvironmentModel(app.serviceManager);
    const panel = new GpuWorkspacePanel(model, sync, checkpoints, runtime, environment, {
      sparklineSeconds: 300
    });
    app.shell.add(panel, 'left', { rank: 850 });
    if (restorer) {
      restorer.add(panel, 'gpuws-panel');
    }

    const openPanel = () => {
      app.shell.activateById(panel.id);
    };
    app.commands.addCommand(CommandIDs.openPanel, {
      label: 'Open GPU Workspace panel',
      caption: 'Show GPU utilisation, memory and system figures',
      icon: gpuIcon,
      execute: openPanel
    });
    app.commands.addCommand(CommandIDs.persist, {
      label: 'Persist now',
      caption: 'Save every open document, then upload everything in the work directory to the store now',
      isEnabled: () => !sync.persisting,
      execute: () => sync.persist()
    });
    app.commands.addCommand(CommandIDs.release, {
      label: 'Persist and release the runtime',
      caption: 'Persist everything, then shut the server down so a paid runtime stops',
      execute: () => runtime.release()
    });
    // Training in view: the runs (polled), their anomalies as notifications, the status bar's
    // words, and the "Training and GPUs" dashboard in the main area (restored on reload).
    const training = new TrainingModel();
    const dashboards = new WidgetTracker<TrainingDashboard>({ namespace: 'gpuws-training' });
    const openDashboard = () => {
      let dashboard = dashboards.find(() => true) ?? null;
      if (!dashboard || dashboard.isDisposed) {
        dashboard = new TrainingDashboard(training, new TrainingHistoryModel());
        void dashboards.add(dashboard);
        app.shell.add(dashboard, 'main');
      }
      app.shell.activateById(dashboard.id);
    };
    app.commands.addCommand(CommandIDs.openDashboard, {
      label: 'Open Training and GPUs',
      caption: 'Loss and scalars of each tracked run over steps, GPU utilisation and memory over time',
      icon: gpuIcon,
      execute: openDashboard
    });
    if (restorer) {
      void restorer.restore(dashboards, { command: CommandIDs.openDashboard, name: () => 'gpuws-training' });
    }
    themeManager?.themeChanged.connect(() => dashboards.forEach(d => d.themeChanged()));
    const trainingNotifier = new TrainingNotifier(training, openDashboard);
    if (statusBar) {
      statusBar.registerStatusItem(`${PLUGIN_ID}:training`, {
        item: new TrainingStatusItem(training, openDashboard),
        align: 'left',
        rank: 51,
        isActive: () => training.runs.some(r => r.live),
        activeStateChanged: training.changed
      });
    }
    palette?.addItem({ command: CommandIDs.openDashboard, category: 'GPU Workspace' });
    palette?.addItem({ command: CommandIDs.openPanel, category: 'GPU Workspace' });
    palette?.addItem({ command: CommandIDs.release, category: 'GPU Workspace' });
    palette?.addItem({ command: CommandIDs.persist, category: 'GPU Workspace' });

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
          trainingNotifier.enabled = notifier.enabled;
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
