// The vocabulary's rules for sizes, counts, durations, ages and templates: the words the panel,
// the status bar and the notifications share with %gpuws and jupyter gpuws.
import {
  ago,
  clock,
  count,
  deadlineSource,
  duration,
  fill,
  percent,
  percentText,
  shortPath,
  size,
  span,
  stepOf,
  timeLeft,
  usage,
  wholeNumber
} from '../vocabulary';

describe('sizes', () => {
  it('reads bytes in the largest binary unit with one decimal below 100', () => {
    expect(size(17)).toBe('17 B');
    expect(size(34304)).toBe('33.5 KiB');
    expect(size(15 * 2 ** 30)).toBe('15.0 GiB');
    expect(size(160 * 2 ** 20)).toBe('160 MiB');
  });

  it('says a dash for a size nobody knows', () => {
    expect(size(null)).toBe('—');
    expect(size(undefined)).toBe('—');
  });

  it('reads used of total in the total unit, the total without a needless .0', () => {
    expect(usage(39.9 * 2 ** 30, 80 * 2 ** 30)).toBe('39.9/80 GiB');
    expect(usage(0.4 * 2 ** 30, 9.5 * 2 ** 30)).toBe('0.4/9.5 GiB');
  });

  it('reads an unknown part of a usage as a dash', () => {
    expect(usage(null, 2 ** 30)).toBe('— / 1.0 GiB');
  });
});

describe('counts', () => {
  it('puts the noun in the plural except for one', () => {
    expect(count(1, 'file')).toBe('1 file');
    expect(count(0, 'file')).toBe('0 files');
    expect(count(2, 'file')).toBe('2 files');
  });

  it('takes irregular plurals from the shared table', () => {
    expect(count(1, 'conflict copy')).toBe('1 conflict copy');
    expect(count(3, 'conflict copy')).toBe('3 conflict copies');
    expect(count(2, 'entry')).toBe('2 entries');
    expect(count(2, 'process')).toBe('2 processes');
  });

  it('groups thousands', () => {
    expect(count(1204, 'wheel')).toBe('1,204 wheels');
    expect(wholeNumber(1199.6)).toBe('1,200');
  });

  it('reads a step of its total, or alone', () => {
    expect(stepOf(1200, 5000)).toBe('step 1,200/5,000');
    expect(stepOf(40, null)).toBe('step 40');
    expect(stepOf(40, 0)).toBe('step 40');
  });
});

describe('times', () => {
  it('reads an age in the largest unit that fits', () => {
    expect(span(12)).toBe('12 s');
    expect(span(89)).toBe('89 s');
    expect(span(240)).toBe('4 min');
    expect(span(3 * 3600)).toBe('3 h');
    expect(span(2 * 86400)).toBe('2 d');
  });

  it('never reads an age below zero (clocks that disagree)', () => {
    expect(span(-5)).toBe('0 s');
    expect(duration(-5)).toBe('0 s');
    expect(clock(-5)).toBe('0:00');
  });

  it('adds "ago" to an age', () => {
    expect(ago(240)).toBe('4 min ago');
  });

  it('reads a duration in hours and minutes', () => {
    expect(duration(40)).toBe('40 s');
    expect(duration(12 * 60)).toBe('12 min');
    expect(duration(2 * 3600 + 5 * 60)).toBe('2 h 5 min');
  });

  it('reads a countdown as a clock', () => {
    expect(clock(11 * 3600 + 42 * 60 + 5)).toBe('11:42:05');
    expect(clock(9 * 60 + 5)).toBe('9:05');
    expect(clock(42.9)).toBe('0:42');
  });

  it('reads the time left in the largest unit, minutes padded after hours', () => {
    expect(timeLeft(2 * 3600 + 5 * 60)).toBe('2 h 05 left');
    expect(timeLeft(24 * 60 + 30)).toBe('24 min left');
    expect(timeLeft(40)).toBe('40 s left');
  });
});

describe('templates and names', () => {
  it('fills every occurrence of each name', () => {
    expect(fill('{a} and {b}, {a}', { a: 1, b: 'two' })).toBe('1 and two, 1');
  });

  it('names what ends the runtime, or the source itself when unknown', () => {
    expect(deadlineSource('preemption:gcp')).toBe('GCP preemption');
    expect(deadlineSource('max_runtime')).toBe('runtime limit');
    expect(deadlineSource('something-new')).toBe('something-new');
    expect(deadlineSource(null)).toBe('');
  });

  it('reads a percentage, or a dash when unknown', () => {
    expect(percentText(47.4)).toBe('47 %');
    expect(percentText(null)).toBe('—');
  });

  it('computes a share only of a known, positive total', () => {
    expect(percent(1, 4)).toBe(25);
    expect(percent(1, 0)).toBeNull();
    expect(percent(null, 4)).toBeNull();
  });

  it('shows the file name of a path', () => {
    expect(shortPath('work/runs/train.ipynb')).toBe('train.ipynb');
    expect(shortPath('train.ipynb')).toBe('train.ipynb');
    expect(shortPath('folder/')).toBe('folder/');
  });
});
