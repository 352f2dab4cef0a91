// How figures read in the panel and the status bar.

export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) {
    return '—';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value >= 100 || unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function percent(used: number | null, total: number | null): number | null {
  if (used === null || total === null || total <= 0) {
    return null;
  }
  return (100 * used) / total;
}

export function formatPercent(value: number | null): string {
  return value === null ? '—' : `${Math.round(value)}%`;
}

/** The file name of a notebook path, which is what users recognise. */
export function shortPath(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/** "45 s", "3 min": how long a chart reaches back. */
export function formatSpan(seconds: number): string {
  return seconds < 90 ? `${Math.round(seconds)} s` : `${Math.round(seconds / 60)} min`;
}
