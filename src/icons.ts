// The extension's own icons, drawn for it: a GPU (a wide chip showing its grid of cores, so it is
// not taken for JupyterLab's square kernel chip), Persist (a cloud with an arrow up), Snapshot (a
// camera) and Checkpoint (a flag). They follow the theme through JupyterLab's jp-icon3 class.
import { LabIcon } from '@jupyterlab/ui-components';

function svg(paths: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">${paths}</g>
</svg>`;
}

export const gpuIcon = new LabIcon({
  name: 'jupyter_gpu_ws:gpu',
  svgstr: svg(
    '<path fill-rule="evenodd" d="M3 7A1.5 1.5 0 0 1 4.5 5.5h15A1.5 1.5 0 0 1 21 7v10a1.5 1.5 0 0 1-1.5 1.5h-15A1.5 1.5 0 0 1 3 17zM5 7.5v9h14v-9z"/>' +
      '<path d="M6.5 9h3v2.5h-3zM10.5 9h3v2.5h-3zM14.5 9h3v2.5h-3zM6.5 12.5h3V15h-3zM10.5 12.5h3V15h-3zM14.5 12.5h3V15h-3z' +
      'M6 2.5h1.5v3H6zM9.5 2.5H11v3H9.5zM13 2.5h1.5v3H13zM16.5 2.5H18v3h-1.5z' +
      'M6 18.5h1.5v3H6zM9.5 18.5H11v3H9.5zM13 18.5h1.5v3H13zM16.5 18.5H18v3h-1.5z"/>'
  )
});

export const persistIcon = new LabIcon({
  name: 'jupyter_gpu_ws:persist',
  svgstr: svg(
    '<path fill-rule="evenodd" d="M6.5 19a4.5 4.5 0 0 1-.9-8.91 6.5 6.5 0 0 1 12.52-.9A4.9 4.9 0 0 1 17.5 19zM12 8.5l-4 4h2.75V16h2.5v-3.5H16z"/>'
  )
});

export const snapshotIcon = new LabIcon({
  name: 'jupyter_gpu_ws:snapshot',
  svgstr: svg(
    '<path fill-rule="evenodd" d="M8.5 4h7l1.5 2.5h3A1.5 1.5 0 0 1 21.5 8v10a1.5 1.5 0 0 1-1.5 1.5H4A1.5 1.5 0 0 1 2.5 18V8A1.5 1.5 0 0 1 4 6.5h3zM12 8.5a4.5 4.5 0 1 0 0 9 4.5 4.5 0 0 0 0-9zm0 2a2.5 2.5 0 1 1 0 5 2.5 2.5 0 0 1 0-5z"/>'
  )
});

export const checkpointIcon = new LabIcon({
  name: 'jupyter_gpu_ws:checkpoint',
  svgstr: svg('<path d="M5 2.5h2v19H5zM8 3.5h11l-3 4.5 3 4.5H8z"/>')
});
