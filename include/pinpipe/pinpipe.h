/*
 * pinpipe/pinpipe.h: the whole public API of libpinpipe.
 *
 * pinpipe keeps a GPU (or the CPU) fed with training batches: worker threads
 * read and decode dataset shards into a ring of pinned host buffers, and a
 * transfer stage copies each batch to the device asynchronously, overlapped
 * with compute.  Compile with `pkg-config --cflags --libs pinpipe`.
 */
#ifndef PINPIPE_H
#define PINPIPE_H

#include "pinpipe/common.h"
#include "pinpipe/comm.h"
#include "pinpipe/dataset.h"
#include "pinpipe/grad_sync.h"
#include "pinpipe/device.h"
#include "pinpipe/nn.h"
#include "pinpipe/summary.h"
#include "pinpipe/source.h"
#include "pinpipe/image.h"
#include "pinpipe/loader.h"
#include "pinpipe/transfer.h"
#include "pinpipe/tokens.h"

#endif
