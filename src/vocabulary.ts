// The words and figures users read, in one place: the same vocabulary.json that `%gpuws`,
// `jupyter gpuws` and the server's notices read (jupyter_gpu_ws/vocabulary.py follows the same
// rules for sizes, ages and durations), so the panel, the status bar and a notebook agree.
import WORDS from '../jupyter_gpu_ws/vocabulary.json';

export { WORDS };

const UNITS = WORDS.units;

/** How much a few words need the user: the tone they are shown in. */
export type Level = 'ok' | 'pending' | 'warning' | 'error' | 'none';

/** A few words for the status bar or a header, their explanation (the tooltip) and their tone. */
export interface IWord {
  text: string;
  title: string;
  level: Level;
}

/** The project's documentation page `page` (e.g. 'checkpoints.md'). */
export function docsUrl(page: string): string {
  return WORDS.docs + page;
}

/** A vocabulary template with its {names} filled in. */
export function fill(template: string, values: { [name: string]: string | number }): string {
  return Object.keys(values).reduce(
    (text, name) => text.split(`{${name}}`).join(String(values[name])),
    template
  );
}

function scaled(n: number): [number, number] {
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.bytes.length - 1) {
    value /= 1024;
    unit++;
  }
  return [value, unit];
}

/** Bytes as people read them: "17 B", "33.5 KiB", "15.0 GiB", "160 MiB"; "—" when unknown. */
export function size(n: number | null | undefined): string {
  if (n === null || n === undefined) {
    return '—';
  }
  const [value, unit] = scaled(n);
  return `${value.toFixed(unit === 0 || Math.abs(value) >= 100 ? 0 : 1)} ${UNITS.bytes[unit]}`;
}

/** Used of total in the total's unit: "39.9/80 GiB", "0.4/9.5 GiB". */
export function usage(used: number | null | undefined, total: number | null | undefined): string {
  if (used === null || used === undefined || total === null || total === undefined) {
    return `${size(used)} / ${size(total)}`;
  }
  const [top, unit] = scaled(total);
  const part = used / Math.pow(1024, unit);
  const usedText = part.toFixed(unit === 0 || part >= 100 ? 0 : 1);
  const totalText = top.toFixed(unit === 0 || top >= 100 ? 0 : 1).replace(/\.0$/, '');
  return `${usedText}/${totalText} ${UNITS.bytes[unit]}`;
}

/** "47 %", or "—" when unknown. */
export function percentText(value: number | null | undefined): string {
  return value === null || value === undefined
    ? '—'
    : fill(UNITS.percent, { value: value.toFixed(0) });
}

/** A whole number as people read it: "1,200". */
export function wholeNumber(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

/** A step of a run, of its total where known: "step 1,200/5,000", "step 40". */
export function stepOf(step: number, total: number | null | undefined): string {
  return total ? `step ${wholeNumber(step)}/${wholeNumber(total)}` : `step ${wholeNumber(step)}`;
}

/** "1 file", "2 files", "1 conflict copy", "1,204 wheels". */
export function count(n: number, noun: string): string {
  const plurals = WORDS.plurals as { [noun: string]: string };
  return `${n.toLocaleString('en-US')} ${n === 1 ? noun : (plurals[noun] ?? `${noun}s`)}`;
}

/** How long ago, without "ago": "12 s", "4 min", "3 h", "2 d". */
export function span(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) {
    return `${s} ${UNITS.second}`;
  }
  if (s < 5400) {
    return `${Math.round(s / 60)} ${UNITS.minute}`;
  }
  if (s < 36 * 3600) {
    return `${Math.round(s / 3600)} ${UNITS.hour}`;
  }
  return `${Math.round(s / 86400)} ${UNITS.day}`;
}

/** Seconds since something as an age: "12 s ago", "4 min ago". */
export function ago(seconds: number): string {
  return fill(UNITS.ago, { age: span(seconds) });
}

/** A length of time: "40 s", "12 min", "2 h 5 min". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) {
    return `${s} ${UNITS.second}`;
  }
  const h = Math.floor(s / 3600);
  const m = Math.round((s % 3600) / 60);
  return h > 0 ? `${h} ${UNITS.hour} ${m} ${UNITS.minute}` : `${m} ${UNITS.minute}`;
}

/** A countdown: "11:42:05", "9:05", "0:42". */
export function clock(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}

/** "2 h 05 left", "24 min left", "40 s left". */
export function timeLeft(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const text =
    h > 0
      ? `${h} ${UNITS.hour} ${String(m).padStart(2, '0')}`
      : m > 0
        ? `${m} ${UNITS.minute}`
        : `${s} ${UNITS.second}`;
  return fill(WORDS.runtime.left, { time: text });
}

/** What ends the runtime, in words: "runtime limit", "GCP preemption". */
export function deadlineSource(source: string | null | undefined): string {
  const sources = WORDS.deadline_sources as { [source: string]: string };
  return source ? (sources[source] ?? source) : '';
}

/** `used` as a share of `total` in per cent, or null when either is unknown (or the total 0). */
export function percent(used: number | null, total: number | null): number | null {
  if (used === null || total === null || total <= 0) {
    return null;
  }
  return (100 * used) / total;
}

/** The file name of a path, which is what users recognise: "train.ipynb". */
export function shortPath(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}
