#!/usr/bin/env python3
"""Run tview (moteus-gui's main window, unmodified) against a servo and do what a person
would: wait for it to list the configuration and the telemetry records, open servo_stats in
the telemetry tree (tview then asks for it with `tel rate servo_stats 100`), plot its
position, type a position command into tview's diagnostic console, watch the telemetry
arrive, take a screenshot of the window. Prints one JSON object with what tview ended up
holding, then exits (0 when it got that far, 1 with a "failed" message otherwise).

    tview_driver.py --fdcanusb PATH -t ID --screenshot FILE.png [--command "d pos ..."]
                    [--emissions N] [--limit SECONDS]

Used by crates/rtloop-cli/tests/cli/tview.rs. Reaches into tview only through the objects its own
main() builds (TviewMainWindow, its Device objects, the trees and the console widget).
"""
import argparse
import asyncio
import json
import math
import os
import sys
import time
import traceback

import moteus
from moteus_gui import tview

# tview picks its Qt binding when imported; use the same one.
from qtpy import QtCore, QtWidgets
import asyncqt


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('-d', '--devices', '-t', '--target', action='append', type=str, default=[])
    parser.add_argument('--can-prefix', type=int, default=0)
    parser.add_argument('--screenshot', required=True)
    parser.add_argument('--command', default='d pos 1 0 1 v0.5 a1 t10')
    parser.add_argument('--emissions', type=int, default=30)
    parser.add_argument('--limit', type=float, default=60.0)
    parser.add_argument('--config-key', action='append', default=[],
                        help='report what the config tree shows for this key')
    moteus.make_transport_args(parser)
    return parser.parse_args()


async def wait_until(what, predicate, limit):
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit:
            raise TimeoutError(f'tview did not {what} within {limit:.0f} s')
        await asyncio.sleep(0.05)


def tree_children(item):
    return [item.child(i) for i in range(item.childCount())]


def tree_value(item, dotted):
    """The value column of the config tree item at `dotted` below `item` (None if absent)."""
    for name in dotted.split('.'):
        item = next((c for c in tree_children(item) if c.text(0) == name), None)
        if item is None:
            return None
    return item.text(1)


def count_leaves(item):
    children = tree_children(item)
    return 1 if not children else sum(count_leaves(c) for c in children)


async def drive(tv, args, report):
    deadline = time.monotonic() + args.limit

    def left():
        return max(1.0, deadline - time.monotonic())

    await wait_until('create its device', lambda: len(tv.devices) > 0, left())
    device = tv.devices[0]
    # On connect tview runs `tel stop`, reads the configuration (`conf list`, then
    # `conf schema` and `conf data` per group; `conf enumerate` on older firmware) and the
    # telemetry records (`tel list`, `tel schema` per record).
    await wait_until('list the telemetry records',
                     lambda: 'servo_stats' in device._telemetry_records, left())
    await wait_until('list the configuration', lambda: len(device._config_tree_items) > 0, left())
    report['config_schema_form'] = getattr(device, '_schema_config', None)
    report['config_groups'] = sorted(device._config_tree_items.keys())
    report['config_leaves'] = sum(count_leaves(i) for i in device._config_tree_items.values())
    # What the config tree shows for a few keys (decoded from `conf data` by tview).
    report['config_values'] = {
        key: tree_value(device._config_tree_items[key.split('.', 1)[0]], key.split('.', 1)[1])
        for key in args.config_key if key.split('.', 1)[0] in device._config_tree_items}

    # Count what reaches servo_stats: tview calls Record.update once per emission.
    record = device._telemetry_records['servo_stats']
    seen = []
    original_update = record.update

    def counting_update(struct, now):
        seen.append({'mode': int(getattr(struct, 'mode', -1)),
                     'position': float(getattr(struct, 'position', math.nan))})
        return original_update(struct, now)

    record.update = counting_update

    # What a click on the record's arrow does: the tree item expands and tview sends
    # `tel fmt servo_stats 0` and `tel rate servo_stats 100`.
    tree = tv.ui.telemetryTreeWidget
    tv.ui.telemetryDock.raise_()
    tree.expandItem(record.tree_item.parent())
    tree.expandItem(record.tree_item)
    # What "Plot Left" in the context menu of servo_stats.position does.
    plot = tv.ui.plotWidget.add_plot('servo_stats.position', record.get_signal('position'), 0)
    tv.ui.plotItemCombo.addItem('servo_stats.position', plot)

    await wait_until('receive servo_stats telemetry', lambda: len(seen) >= 3, left())
    # Typed into tview's diagnostic console and sent with Enter. From the Qt event loop, as
    # a key press would be: tview starts a task for it, which cannot happen inside this one.
    sent_at = len(seen)
    QtCore.QTimer.singleShot(0, lambda: tv.console.execute(args.command))
    await wait_until(f'receive {args.emissions} servo_stats emissions after the command',
                     lambda: len(seen) - sent_at >= args.emissions, left())

    report['servo_stats_emissions'] = len(seen)
    report['telemetry_records'] = sorted(device._telemetry_records.keys())
    report['modes_after_command'] = sorted({s['mode'] for s in seen[sent_at:]})
    report['position_at_command'] = seen[sent_at]['position'] if len(seen) > sent_at else None
    report['position_last'] = seen[-1]['position']
    text = tv.console._control.toPlainText()
    report['console_tail'] = text[-3000:]

    tree.resizeColumnToContents(0)
    # Let Qt repaint (the plot redraws on its own timer) before the grab.
    await asyncio.sleep(0.5)
    pixmap = tv.ui.grab()
    report['screenshot_saved'] = bool(pixmap.save(args.screenshot, 'PNG'))
    report['screenshot_size'] = [pixmap.width(), pixmap.height()]


def main():
    args = parse_args()
    app = QtWidgets.QApplication(sys.argv)
    loop = asyncqt.QEventLoop(app)
    asyncio.set_event_loop(loop)
    tv = tview.TviewMainWindow(args)
    tv.ui.resize(1280, 800)
    tv.show()
    report = {'platform': app.platformName()}

    def finish(code, failure=None):
        if failure:
            report['failed'] = failure
            if tv.devices:
                report['console_tail'] = tv.console._control.toPlainText()[-3000:]
        sys.stdout.write(json.dumps(report) + '\n')
        sys.stdout.flush()
        # As tview's own exit: skip Qt's teardown, which can trip over the running loop.
        os._exit(code)

    async def run():
        try:
            await drive(tv, args, report)
            finish(0)
        except Exception as e:  # noqa: BLE001 (report anything, then exit)
            finish(1, f'{e}\n{traceback.format_exc()}')

    loop.create_task(run())
    with loop:
        loop.run_forever()


if __name__ == '__main__':
    main()
