/*
 * common/fault.c: the fault plans of common/fault.h: arming, counting the
 * calls of each site, and the PP_FAULTS syntax.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"

_Thread_local struct pp_fault_plan *pp_fault_thread;

static const char *const site_names[PP_FAULT_NSITES] = {
	"alloc", "read", "uring_setup", "uring_read", "uring_submit", "write", "pin", "cuda_start", "graph",
	"comm",
};

static const struct {
	const char *name;
	int mode;
} mode_names[] = {
	{ "EIO", -EIO },       { "EINTR", -EINTR }, { "EAGAIN", -EAGAIN }, { "ENOSPC", -ENOSPC },
	{ "ENOSYS", -ENOSYS }, { "EPERM", -EPERM }, { "ENOMEM", -ENOMEM }, { "short", PP_FAULT_SHORT },
	{ "stall", PP_FAULT_STALL },
};

int pp_fault_init(struct pp_fault_plan *p)
{
	memset(p, 0, sizeof(*p));
	if (pipe2(p->stall_fd, O_CLOEXEC) != 0) {
		p->stall_fd[0] = p->stall_fd[1] = -1;
		return pp_error(-errno, "fault plan: pipe2 failed: %s", strerror(errno));
	}
	return 0;
}

void pp_fault_fini(struct pp_fault_plan *p)
{
	if (p->stall_fd[0] >= 0) {
		close(p->stall_fd[0]);
		close(p->stall_fd[1]);
	}
	p->stall_fd[0] = p->stall_fd[1] = -1;
}

void pp_fault_arm(struct pp_fault_plan *p, enum pp_fault_site site, int mode, uint64_t after,
		  uint64_t count)
{
	struct pp_fault *f = &p->site[site];

	f->mode = mode;
	f->after = after;
	f->count = count;
	atomic_store(&f->calls, 0);
	atomic_store(&f->hits, 0);
}

void pp_fault_set(struct pp_fault_plan *p)
{
	pp_fault_thread = p;
}

int pp_fault_hit(struct pp_fault_plan *p, enum pp_fault_site site)
{
	struct pp_fault *f = &p->site[site];
	uint64_t n;

	if (f->mode == 0)
		return 0;
	n = atomic_fetch_add(&f->calls, 1);
	if (n < f->after || (f->count != 0 && n - f->after >= f->count))
		return 0;
	atomic_fetch_add(&f->hits, 1);
	return f->mode;
}

/* Parses "NAME:MODE[:after=N][:count=N]" of length len. */
static int parse_one(struct pp_fault_plan *p, const char *s, size_t len)
{
	char buf[128], *save = NULL, *tok;
	unsigned long long after = 0, count = 0;
	int site = -1, mode = 0;

	if (len >= sizeof(buf))
		return pp_error(-EINVAL, "PP_FAULTS: entry '%.*s' is too long", (int)len, s);
	memcpy(buf, s, len);
	buf[len] = '\0';
	tok = strtok_r(buf, ":", &save);
	for (size_t i = 0; tok != NULL && i < PP_ARRAY_SIZE(site_names); i++)
		if (strcmp(tok, site_names[i]) == 0)
			site = (int)i;
	if (site < 0)
		return pp_error(-EINVAL, "PP_FAULTS: unknown site in '%.*s' (expected alloc, read, "
				"uring_setup, uring_read, uring_submit, write, pin, cuda_start, graph or comm)", (int)len, s);
	tok = strtok_r(NULL, ":", &save);
	for (size_t i = 0; tok != NULL && i < PP_ARRAY_SIZE(mode_names); i++)
		if (strcmp(tok, mode_names[i].name) == 0)
			mode = mode_names[i].mode;
	if (mode == 0)
		return pp_error(-EINVAL, "PP_FAULTS: unknown mode in '%.*s' (expected an errno name "
				"such as EIO, or short, or stall)", (int)len, s);
	while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
		char end;
		if (sscanf(tok, "after=%llu%c", &after, &end) != 1 &&
		    sscanf(tok, "count=%llu%c", &count, &end) != 1)
			return pp_error(-EINVAL, "PP_FAULTS: '%s' in '%.*s': expected after=N or count=N",
					tok, (int)len, s);
	}
	pp_fault_arm(p, (enum pp_fault_site)site, mode, after, count);
	return 0;
}

int pp_fault_parse(struct pp_fault_plan *p, const char *spec)
{
	while (*spec != '\0') {
		size_t len = strcspn(spec, ";");
		int ret;

		if (len > 0 && (ret = parse_one(p, spec, len)) < 0)
			return ret;
		spec += len + (spec[len] == ';');
	}
	return 0;
}
