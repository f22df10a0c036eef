/*
 * Holmes: a communication runtime for training on GPU pools whose networks differ.
 *
 * This header is the only stable ABI of libholmes. It is C99 and can be included from C++.
 * Every function returns an hm_status_t; on failure, hm_last_error_message() gives the detail
 * (which peer, which link, what was expected) for the calling thread.
 *
 * Handles are opaque. Communicators are used by one thread at a time for collectives (as with
 * NCCL); hm_comm_abort and hm_comm_get_async_error may be called from any thread.
 */
#ifndef HOLMES_HOLMES_H_
#define HOLMES_HOLMES_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define HM_API __declspec(dllexport)
#elif defined(__GNUC__)
#define HM_API __attribute__((visibility("default")))
#else
#define HM_API
#endif

/* The enums below have int as their underlying type in C++ (C99 has no way to say it). A C
 * caller may pass any int for an enum parameter, and the library refuses a value that names
 * nothing with HM_ERR_INVALID_ARGUMENT; in C++ such a value is undefined behaviour for an enum
 * without a fixed underlying type (UBSan: "not a valid value for type"), and valid with one.
 * Size, alignment and calling convention stay those of the C enums. */
#ifdef __cplusplus
#define HM_ENUM_BASE : int
#else
#define HM_ENUM_BASE
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define HOLMES_VERSION_MAJOR 0
#define HOLMES_VERSION_MINOR 1
#define HOLMES_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch */
#define HOLMES_VERSION_CODE \
  (HOLMES_VERSION_MAJOR * 10000 + HOLMES_VERSION_MINOR * 100 + HOLMES_VERSION_PATCH)

/* ---------------------------------------------------------------------------------------------
 * Results
 * ------------------------------------------------------------------------------------------- */
typedef enum hm_status HM_ENUM_BASE {
  HM_SUCCESS = 0,
  HM_ERR_INVALID_ARGUMENT = 1, /* null pointer, unknown enum, rank out of range, overflow ... */
  HM_ERR_MISMATCH = 2,         /* ranks disagree on count, dtype, op, root or link */
  HM_ERR_TIMEOUT = 3,          /* a blocking wait ran past the communicator's timeout */
  HM_ERR_PEER_FAILED = 4,      /* a peer's process or link went away */
  HM_ERR_AUTH = 5,             /* the job token was not proven (store or data plane) */
  HM_ERR_TRANSPORT = 6,        /* a socket or device error that is not a peer failure */
  HM_ERR_UNSUPPORTED = 7,      /* asked for something this build or machine cannot do */
  HM_ERR_OUT_OF_MEMORY = 8,
  HM_ERR_ABORTED = 9, /* the communicator was aborted (hm_comm_abort) or destroyed */
  HM_ERR_INTERNAL = 10
} hm_status_t;

/* A short constant name for a status ("HM_ERR_TIMEOUT"); never NULL. */
HM_API const char* hm_status_string(hm_status_t status);

/* The detail of the most recent failing call on this thread; "" if none. The pointer stays
 * valid until the next failing Holmes call on this thread. */
HM_API const char* hm_last_error_message(void);

/* HOLMES_VERSION_CODE of the library actually loaded. */
HM_API hm_status_t hm_get_version(int* version);

/* ---------------------------------------------------------------------------------------------
 * Data types and reduction operations
 * ------------------------------------------------------------------------------------------- */
typedef enum hm_dtype HM_ENUM_BASE {
  HM_INT8 = 0,
  HM_UINT8 = 1,
  HM_INT32 = 2,
  HM_UINT32 = 3,
  HM_INT64 = 4,
  HM_UINT64 = 5,
  HM_FLOAT16 = 6,  /* IEEE 754 binary16; reduced in float32 */
  HM_BFLOAT16 = 7, /* bfloat16; reduced in float32 */
  HM_FLOAT32 = 8,
  HM_FLOAT64 = 9,
  HM_DTYPE_COUNT = 10
} hm_dtype_t;

/* Integer sum and product wrap around (two's complement); integer average truncates toward
 * zero. Floating-point average is the sum divided by the number of ranks. */
typedef enum hm_op HM_ENUM_BASE {
  HM_SUM = 0,
  HM_PROD = 1,
  HM_MIN = 2,
  HM_MAX = 3,
  HM_AVG = 4,
  HM_OP_COUNT = 5
} hm_op_t;

/* Collectives, and the algorithms they can run with (see hm_comm_set_algorithm). */
typedef enum hm_collective HM_ENUM_BASE {
  HM_COLL_ALLREDUCE = 0,
  HM_COLL_REDUCE_SCATTER = 1,
  HM_COLL_ALLGATHER = 2,
  HM_COLL_BROADCAST = 3,
  HM_COLL_REDUCE = 4,
  HM_COLL_ALLTOALL = 5,
  HM_COLL_BARRIER = 6,
  HM_COLLECTIVE_COUNT = 7
} hm_collective_t;

typedef enum hm_algorithm HM_ENUM_BASE {
  HM_ALGO_AUTO = 0,               /* chosen per call by the cost model */
  HM_ALGO_RING = 1,               /* pipelined ring: allreduce, reduce_scatter, allgather */
  HM_ALGO_RECURSIVE_DOUBLING = 2, /* allreduce, small messages */
  HM_ALGO_HALVING_DOUBLING = 3,   /* allreduce (Rabenseifner), medium messages */
  HM_ALGO_TREE = 4,               /* binomial tree: broadcast, reduce */
  HM_ALGO_CHAIN = 5,              /* pipelined chain: broadcast, reduce */
  HM_ALGO_PAIRWISE = 6,           /* alltoall */
  HM_ALGO_HIERARCHICAL = 7,       /* by islands: allreduce, broadcast, reduce */
  HM_ALGO_DISSEMINATION = 8,      /* barrier */
  HM_ALGO_SHARED_MEMORY = 9, /* one host, small buffers: allreduce, broadcast, reduce, barrier */
  HM_ALGORITHM_COUNT = 10
} hm_algorithm_t;

/* Short name of an algorithm ("ring", "rd", "rhd", "tree", "chain", "pairwise", "hier",
 * "dissemination", "shm", "auto"); "unknown" for a bad value. */
HM_API const char* hm_algorithm_name(hm_algorithm_t algorithm);

/* Size in bytes of one element of dtype. */
HM_API hm_status_t hm_dtype_size(hm_dtype_t dtype, size_t* size);

/* ---------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------- */
typedef struct hm_comm* hm_comm_t;
typedef struct hm_request* hm_request_t;

/* A key-value store the caller brings (torch.distributed's Store, etcd, Redis, files on a shared
 * file system ...), set in hm_config_t.kv_store: the ranks meet through it instead of through a
 * Holmes store (HOLMES_STORE), which no rank then serves. Every rank of the world must be given
 * a store in which the others' keys appear. Holmes calls the functions only inside hm_init, from
 * the calling thread, with NUL-terminated keys that start with "holmes/". Each returns 0 on
 * success and nonzero on failure (hm_init then fails naming the key and the function); the
 * struct and `user` must stay valid until hm_init returns. */
typedef struct hm_kv_store {
  size_t size; /* sizeof(hm_kv_store_t); set by HM_KV_STORE_INITIALIZER */
  void* user;  /* passed to every function */
  /* Stores length bytes of value under key, replacing what was there. */
  int (*set)(void* user, const char* key, const void* value, size_t length);
  /* Waits up to timeout_ms for key to be set (by any rank), then copies at most capacity bytes of
   * its value into value and sets *length to the value's whole length; when that is more than
   * capacity, Holmes calls again with a larger buffer. Returns 0 when the key was there, 1 when
   * it was not set in time (hm_init fails with HM_ERR_TIMEOUT), any other value when the store
   * failed (HM_ERR_TRANSPORT). */
  int (*get)(void* user, const char* key, void* value, size_t capacity, size_t* length,
             int timeout_ms);
  /* Adds delta to the integer counter at key (missing: 0), atomically across ranks, and sets
   * *result to the new value. */
  int (*add)(void* user, const char* key, int64_t delta, int64_t* result);
} hm_kv_store_t;

#define HM_KV_STORE_INITIALIZER \
  { sizeof(hm_kv_store_t), NULL, NULL, NULL, NULL }

/* Settings by name (hm_config_set), owned by the config that holds them. */
typedef struct hm_settings* hm_settings_t;

/* Options of hm_init. Always start from HM_CONFIG_INITIALIZER so that fields added later keep
 * their defaults; zero, -1 or NULL means "take it from the environment, else the default". */
typedef struct hm_config {
  size_t size;            /* sizeof(hm_config_t); set by HM_CONFIG_INITIALIZER */
  unsigned int version;   /* HOLMES_VERSION_CODE the caller was built against */
  int rank;               /* this process's rank in [0, world_size) */
  int world_size;         /* number of ranks */
  const char* store;      /* rendezvous store "host:port" */
  const char* token;      /* job token; every connection must prove it */
  const char* topology;   /* topology file (YAML); NULL: discover */
  int serve_store;        /* 1: this rank serves the store; 0: it does not; -1: rank 0 does */
  int timeout_ms;         /* every blocking wait; 0: HOLMES_TIMEOUT_MS, else 300000 */
  int sockets_per_peer;   /* tcp sockets per peer and direction; 0: HOLMES_SOCKETS, else 2 */
  const char* local_addr; /* address to listen on for peers; NULL: HOLMES_ADDR, else the
                             address this host uses to reach the store (with kv_store: to reach
                             the store's or MASTER_ADDR's host when given, else the address this
                             host's name resolves to) */
  const hm_kv_store_t* kv_store; /* NULL: rendezvous through `store` / HOLMES_STORE; else
                                    through this store (see hm_kv_store_t); `store` is then
                                    not dialed: its host only picks local_addr's default */
  hm_settings_t settings;        /* any other setting, by name: filled by hm_config_set, freed by
                                    hm_config_release; NULL: none */
} hm_config_t;

#define HM_CONFIG_INITIALIZER \
  { sizeof(hm_config_t), HOLMES_VERSION_CODE, -1, -1, NULL, NULL, NULL, -1, 0, 0, NULL, NULL, NULL }

/* Sets any registered setting by its name (the environment variable's: "HOLMES_SHM_RING_BYTES",
 * "HOLMES_ALGO", ...; holmes-run --print-settings lists them all) for hm_init(config). It wins
 * over the environment; the fields above win over the same setting set here. value NULL removes
 * it. The value is checked at once: an unknown name, or a value of the wrong type or range, is
 * HM_ERR_INVALID_ARGUMENT naming both (hm_last_error_message). The config holds a copy until
 * hm_config_release. Settings of scope "agreed" must be set alike on every rank. */
HM_API hm_status_t hm_config_set(hm_config_t* config, const char* name, const char* value);

/* Frees what hm_config_set stored in config (config->settings becomes NULL); config itself is
 * the caller's. Safe on a config without settings. */
HM_API hm_status_t hm_config_release(hm_config_t* config);

/* Every setting hm_init(config) would run with (config may be NULL: the environment only), one
 * a line: name, value and where it came from ("default", "environment", "hm_config_t"); the
 * token is hidden. Writes at most capacity bytes including the terminating NUL; *length (may be
 * NULL) receives the size needed including the NUL. buffer may be NULL with capacity 0 to ask
 * for the size. */
HM_API hm_status_t hm_config_dump(const hm_config_t* config, char* buffer, size_t capacity,
                                  size_t* length);

/* Creates the world communicator from the environment: HOLMES_RANK, HOLMES_WORLD_SIZE,
 * HOLMES_STORE (host:port), HOLMES_TOKEN, HOLMES_TOPOLOGY, HOLMES_TIMEOUT_MS; or the variables
 * of torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS)
 * and Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE). Rank 0 serves the store at
 * HOLMES_STORE unless HOLMES_STORE_SERVE=0 (holmes-run serves it itself). Collective over all
 * ranks. */
HM_API hm_status_t hm_init_from_env(hm_comm_t* comm);

/* Like hm_init_from_env, with fields of config taking precedence over the environment. */
HM_API hm_status_t hm_init(const hm_config_t* config, hm_comm_t* comm);

HM_API hm_status_t hm_comm_rank(hm_comm_t comm, int* rank);
HM_API hm_status_t hm_comm_size(hm_comm_t comm, int* size);

/* Which transport this rank uses to reach `peer` ("tcp", "shm", "ucx" or "verbs"; "self" for
 * this rank) and why it was chosen ("same host", "other island (a and b)", "forced by
 * HOLMES_TRANSPORT=tcp", ...). The strings belong to the communicator and stay valid until it is
 * destroyed. */
HM_API hm_status_t hm_comm_peer_transport(hm_comm_t comm, int peer, const char** transport,
                                          const char** reason);

/* What carries device buffers between this rank and `peer` in the hierarchical collectives (and
 * in a one-island communicator's allreduce, reduce-scatter and allgather), and why: the engine
 * of the host or island the two share ("ipc": CUDA IPC inside a host, device to device; "nccl";
 * "ring": Holmes's own, staged through pinned memory; "blockwise"), "lanes" (other islands:
 * Holmes's slow tier) or "self". This rank's own view: the group's members agree on their first
 * call on device buffers, which can take the group to the next engine (the log says so).
 * HOLMES_GROUP_ENGINE steers it. Strings as for hm_comm_peer_transport. */
HM_API hm_status_t hm_comm_peer_engine(hm_comm_t comm, int peer, const char** engine,
                                       const char** reason);

/* Forces `algorithm` for `collective` on this communicator (HM_ALGO_AUTO: back to the cost
 * model). Every rank must make the same call: the algorithm is part of each message's
 * signature, so ranks that disagree get HM_ERR_MISMATCH (or HM_ERR_TIMEOUT). An algorithm the
 * collective does not have is HM_ERR_INVALID_ARGUMENT. Overrides HOLMES_ALGO. */
HM_API hm_status_t hm_comm_set_algorithm(hm_comm_t comm, hm_collective_t collective,
                                         hm_algorithm_t algorithm);

/* What a call of `collective` with `count` elements of `dtype` would run with on this
 * communicator (the forced algorithm, or the cost model's choice) and the time the cost model
 * predicts for it, in microseconds (either output may be NULL). For reduce_scatter and
 * allgather, count is per rank, as in the calls. */
HM_API hm_status_t hm_comm_query_algorithm(hm_comm_t comm, hm_collective_t collective, size_t count,
                                           hm_dtype_t dtype, hm_algorithm_t* algorithm,
                                           double* predicted_us);

/* The cost model's numbers for the link from this rank to `peer`: its latency per message in
 * microseconds and its bandwidth in GB/s (either output may be NULL). Nominal figures for the
 * link's tier and transport, those set by HOLMES_COST_<TIER>, or, with HOLMES_COST_PROBE=1, the
 * ones measured when the communicator was created. Every rank holds the same numbers per tier. */
HM_API hm_status_t hm_comm_query_link(hm_comm_t comm, int peer, double* latency_us,
                                      double* gbytes_per_s);

/* Every setting comm runs with and where each came from, as hm_config_dump writes them; tier
 * numbers the topology file gives show with source "topology file". Splits run with their
 * parent's settings. */
HM_API hm_status_t hm_comm_config_dump(hm_comm_t comm, char* buffer, size_t capacity,
                                       size_t* length);

/* Collective over comm: ranks with the same color form a new communicator, ordered by key
 * (then by rank in comm). A rank that passes HM_COLOR_UNDEFINED gets *newcomm = NULL. */
#define HM_COLOR_UNDEFINED (-1)
HM_API hm_status_t hm_comm_split(hm_comm_t comm, int color, int key, hm_comm_t* newcomm);

/* Releases the communicator. Operations still in flight end with HM_ERR_ABORTED. */
HM_API hm_status_t hm_comm_destroy(hm_comm_t comm);

/* Never blocks: marks comm aborted, wakes every thread blocked on it (they return
 * HM_ERR_ABORTED) and closes its connections. The handle must still be destroyed. */
HM_API hm_status_t hm_comm_abort(hm_comm_t comm);

/* Like hm_comm_abort, and the other ranks hear of it: each of them marks comm revoked as soon as
 * the notice arrives, so their in-flight and later operations on comm end with HM_ERR_ABORTED
 * too instead of waiting for the timeout. Never blocks; safe from any thread. The handle stays
 * valid for hm_comm_shrink and must still be destroyed. */
HM_API hm_status_t hm_comm_revoke(hm_comm_t comm);

/* hm_comm_shrink flags. HM_SHRINK_FAILED: the survivors first agree on which ranks failed
 * (every survivor ends with the same set, whenever it noticed the failure, even when another
 * rank dies during the agreement) and leave those out besides `exclude`; comm is revoked first.
 * Without it, every rank not in `exclude` must pass the same list (else HM_ERR_MISMATCH). */
#define HM_SHRINK_DEFAULT 0
#define HM_SHRINK_FAILED 1

/* Collective over the ranks of comm that remain: builds *newcomm from them, in comm's rank order,
 * through the store comm was created with (the job's store must outlive the lost ranks: run it
 * outside rank 0, HOLMES_STORE_SERVE, when rank 0 may be lost). Bounded by a few timeouts. A rank
 * that was left out (in `exclude`, or agreed failed: a frozen rank that wakes) gets
 * HM_ERR_ABORTED and *newcomm = NULL. exclude may be NULL when n_exclude is 0. */
HM_API hm_status_t hm_comm_shrink(hm_comm_t comm, const int* exclude, int n_exclude, int flags,
                                  hm_comm_t* newcomm);

/* Collective over comm's ranks and n_joining processes that call hm_comm_join (a replacement
 * for a lost rank, say): *newcomm holds comm's ranks first, in their order, then the joiners in
 * the order they asked to join. Through the store comm was created with; the joiners must call
 * within the timeout. Settings that must agree (HOLMES_ALGO, ...) are checked as at init. */
HM_API hm_status_t hm_comm_grow(hm_comm_t comm, int n_joining, hm_comm_t* newcomm);

/* In a process started to join a running job (the job's HOLMES_STORE and HOLMES_TOKEN, or cfg's
 * store and token; no rank or world size): waits up to the timeout for the job to grow a
 * communicator (hm_comm_grow) and returns this process's place in it. cfg may be NULL (the
 * environment alone). */
HM_API hm_status_t hm_comm_join(const hm_config_t* cfg, hm_comm_t* newcomm);

/* The first error of the communicator, seen by any call or by a nonblocking operation;
 * HM_SUCCESS in *async_error while it is healthy. */
HM_API hm_status_t hm_comm_get_async_error(hm_comm_t comm, hm_status_t* async_error);

/* Orders comm's calls on device buffers on a CUDA stream (a cudaStream_t; NULL is CUDA's
 * legacy default stream), with NCCL's semantics: hm_allreduce, hm_reduce_scatter, hm_allgather,
 * hm_broadcast, hm_reduce, hm_alltoall, hm_send and hm_recv on device buffers return once
 * enqueued (a message's place among a peer's messages is taken at the call); each starts after
 * the work enqueued on the stream before it, and work enqueued after it waits for it. A host
 * proxy thread runs the network part; the GPU, not a CPU core, waits. A failure after the call
 * returned shows in hm_comm_get_async_error (the stream goes on; the results are undefined).
 * Calls on host buffers keep their semantics. A nonblocking call (hm_iallreduce, ..., hm_isend,
 * hm_irecv) on device buffers moves its data once the stream has reached it (after the work
 * enqueued before it) and does not hold the stream: its request completes when it is done.
 * One stream per communicator (rather than a stream argument on every call) keeps the calls'
 * signatures those of the host path, in C and in every binding; set it again to switch streams.
 * The calling thread's current device must be the stream's. No usable CUDA device:
 * HM_ERR_UNSUPPORTED. */
HM_API hm_status_t hm_comm_set_cuda_stream(hm_comm_t comm, void* stream);
/* Back to blocking calls on device buffers; calls already enqueued still run. */
HM_API hm_status_t hm_comm_clear_cuda_stream(hm_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Collectives (blocking). In place when sendbuf == recvbuf; for reduce_scatter also when
 * recvbuf == sendbuf + rank * recvcount, for allgather also when
 * sendbuf == recvbuf + rank * sendcount (the NCCL conventions).
 * ------------------------------------------------------------------------------------------- */
HM_API hm_status_t hm_allreduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                hm_dtype_t dtype, hm_op_t op);
/* sendbuf holds size * recvcount elements; rank r receives the reduction of block r. */
HM_API hm_status_t hm_reduce_scatter(hm_comm_t comm, const void* sendbuf, void* recvbuf,
                                     size_t recvcount, hm_dtype_t dtype, hm_op_t op);
/* recvbuf holds size * sendcount elements, rank r's contribution at block r. */
HM_API hm_status_t hm_allgather(hm_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t sendcount, hm_dtype_t dtype);
HM_API hm_status_t hm_broadcast(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype,
                                int root);
/* recvbuf is used on root only (may be NULL elsewhere). */
HM_API hm_status_t hm_reduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                             hm_dtype_t dtype, hm_op_t op, int root);
/* count elements go to each rank: block j of sendbuf to rank j, block i of recvbuf from i. */
HM_API hm_status_t hm_alltoall(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                               hm_dtype_t dtype);
/* Point to point. Messages between two ranks arrive in the order they were sent; the receiver's
 * count must equal the sender's (HM_ERR_MISMATCH otherwise). A receive from HM_ANY_SOURCE takes
 * the first message to arrive from any rank that no other receive has taken (each rank's own
 * messages still in the order it sent them); hm_recv_any and hm_irecv_any also say which rank
 * sent it. Any-source receives take messages in the order they were posted; a receive from a
 * named rank posted while one waits takes that rank's next message that has not yet arrived. */
#define HM_ANY_SOURCE (-2)
HM_API hm_status_t hm_send(hm_comm_t comm, const void* buf, size_t count, hm_dtype_t dtype,
                           int peer);
HM_API hm_status_t hm_recv(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int peer);
/* A receive from any source; *source is set to the sender's rank. */
HM_API hm_status_t hm_recv_any(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype,
                               int* source);
HM_API hm_status_t hm_barrier(hm_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Nonblocking forms. Collectives of one communicator run in the order they were issued; the
 * buffers belong to the library until the request completes.
 * ------------------------------------------------------------------------------------------- */
HM_API hm_status_t hm_iallreduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                 hm_dtype_t dtype, hm_op_t op, hm_request_t* request);
HM_API hm_status_t hm_ireduce_scatter(hm_comm_t comm, const void* sendbuf, void* recvbuf,
                                      size_t recvcount, hm_dtype_t dtype, hm_op_t op,
                                      hm_request_t* request);
HM_API hm_status_t hm_iallgather(hm_comm_t comm, const void* sendbuf, void* recvbuf,
                                 size_t sendcount, hm_dtype_t dtype, hm_request_t* request);
HM_API hm_status_t hm_ibroadcast(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype,
                                 int root, hm_request_t* request);
HM_API hm_status_t hm_ireduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                              hm_dtype_t dtype, hm_op_t op, int root, hm_request_t* request);
HM_API hm_status_t hm_ialltoall(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                hm_dtype_t dtype, hm_request_t* request);
HM_API hm_status_t hm_isend(hm_comm_t comm, const void* buf, size_t count, hm_dtype_t dtype,
                            int peer, hm_request_t* request);
HM_API hm_status_t hm_irecv(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int peer,
                            hm_request_t* request);
/* *source, like the buffer, belongs to the library until the request completes: hm_wait or
 * hm_test reporting it done successfully have set it to the sender's rank. */
HM_API hm_status_t hm_irecv_any(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype,
                                int* source, hm_request_t* request);
HM_API hm_status_t hm_ibarrier(hm_comm_t comm, hm_request_t* request);

/* Waits (up to the communicator's timeout) for the request, releases it and sets *request to
 * NULL. Returns the operation's status. */
HM_API hm_status_t hm_wait(hm_request_t* request);
/* Sets *done to 1 and releases the request (setting *request to NULL) if it has completed,
 * returning its status; otherwise sets *done to 0 and returns HM_SUCCESS. Never blocks. */
HM_API hm_status_t hm_test(hm_request_t* request, int* done);
/* The GPU rather than the host waits, as torch's Work.wait() does for NCCL: work enqueued on the
 * communicator's CUDA stream (hm_comm_set_cuda_stream) after this call waits until the request's
 * operation is over, a device receive's data in its buffer and hm_irecv_any's *source set. Returns
 * at once, releases the request and sets *request to NULL. A failure of the operation shows in
 * hm_comm_get_async_error (the stream goes on; the results are undefined). Any request of the
 * communicator, on device or host buffers. No stream set: HM_ERR_INVALID_ARGUMENT, and the request
 * stays the caller's. */
HM_API hm_status_t hm_wait_on_stream(hm_request_t* request);
/* Releases a request without waiting; the operation still runs to its end. */
HM_API hm_status_t hm_request_free(hm_request_t request);

/* ---------------------------------------------------------------------------------------------
 * Planner: TP/PP/DP groups, the stage split and the transport of every group, from the
 * topology (HOLMES_TOPOLOGY, discovery, HOLMES_HOST/ISLAND/FABRIC) and a model description.
 * ------------------------------------------------------------------------------------------- */
typedef struct hm_plan* hm_plan_t;

/* The model to plan for. Start from HM_MODEL_INITIALIZER; name a preset ("gpt-3.6b",
 * "gpt-7.5b", "gpt-39.1b", "tiny", "mlp") or a model file (YAML), then override any field: fields
 * left at 0 (or -1 for recompute) keep the preset's or file's value. tp and pp left at 0 let the
 * planner choose; gpu_memory_gb at 0 takes the GPU model's. */
typedef struct hm_model {
  size_t size; /* sizeof(hm_model_t); set by HM_MODEL_INITIALIZER */
  const char* preset;
  const char* file;
  int layers;
  int hidden;
  int heads;
  int seq_len;
  int vocab;
  int micro_batch;
  int global_batch;
  int dtype_bytes;
  int recompute; /* 1: full activation recompute, 0: none, -1: the preset's */
  int tp;
  int pp;
  double gpu_memory_gb;
  const char* architecture; /* "gpt" (transformer layers) or "mlp" (dense layers); NULL: preset's */
  double device_tflops;     /* 0: each GPU model's speed; else a measured speed for every device */
} hm_model_t;

#define HM_MODEL_INITIALIZER \
  { sizeof(hm_model_t), NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0.0, NULL, 0.0 }

/* The kinds of group a plan forms. */
typedef enum hm_group HM_ENUM_BASE {
  HM_GROUP_TENSOR = 0,   /* tensor parallel: inside one host */
  HM_GROUP_PIPELINE = 1, /* the stages of one model replica, in stage order */
  HM_GROUP_DATA = 2      /* replicas of one stage shard: inside one island */
} hm_group_t;

/* Where the calling rank sits in a plan. A re-plan may leave a survivor out (a spare: too few
 * ranks left on its host or island for a whole TP group or stage): its stage, tp_rank and dp_rank
 * are -1, num_layers and micro_batches 0. */
typedef struct hm_plan_rank {
  int stage;       /* pipeline stage, 0 .. num_stages - 1 */
  int num_stages;  /* pp */
  int first_layer; /* the stage's layers: [first_layer, first_layer + num_layers) */
  int num_layers;
  int tp_rank, tp_size;
  int dp_rank, dp_size;
  int micro_batches; /* per step, for this rank's data-parallel replica (after a re-plan the
                        replicas may differ by one: see hm_plan_replan) */
} hm_plan_rank_t;

/* Collective over world: every rank plans alike from the same inputs, and the ranks check that
 * they did (HM_ERR_MISMATCH otherwise, e.g. for different model descriptions). Fails with
 * HM_ERR_INVALID_ARGUMENT saying why when the model cannot be placed. */
HM_API hm_status_t hm_plan_create(hm_comm_t world, const hm_model_t* model, hm_plan_t* plan);
HM_API hm_status_t hm_plan_destroy(hm_plan_t plan);
HM_API hm_status_t hm_plan_get_rank(hm_plan_t plan, hm_plan_rank_t* rank);
/* Collective over the plan's world: a communicator for the caller's group of that kind, ranked
 * by tp index, stage or dp index. Every rank must ask for the same kinds in the same order; a
 * re-plan's spare takes part and gets *comm = NULL. */
HM_API hm_status_t hm_plan_comm_create(hm_plan_t plan, hm_group_t group, hm_comm_t* comm);
/* The whole plan (Holmes's and the naive placement, predictions, notes) as JSON. Writes at most
 * capacity bytes including the terminating NUL; *length (may be NULL) receives the size needed
 * including the NUL. buffer may be NULL with capacity 0 to ask for the size. */
HM_API hm_status_t hm_plan_get_json(hm_plan_t plan, char* buffer, size_t capacity, size_t* length);
/* Which placement hm_plan_get_rank and hm_plan_comm_create describe: Holmes's (the default) or
 * the naive one the plan compares against (Megatron-LM's rank order and even layer split), so a
 * trainer can run both on the same machines. Every rank must select the same one. */
typedef enum hm_placement HM_ENUM_BASE {
  HM_PLACEMENT_HOLMES = 0,
  HM_PLACEMENT_NAIVE = 1
} hm_placement_t;
HM_API hm_status_t hm_plan_select_placement(hm_plan_t plan, hm_placement_t placement);

/* The predicted step time of the plan and of the naive placement, in seconds (either may be
 * NULL). */
HM_API hm_status_t hm_plan_get_prediction(hm_plan_t plan, double* step_seconds,
                                          double* naive_step_seconds);

/* Re-planning after a loss (docs/reliability.md). Collective over newworld: the survivors of
 * plan's world, in its rank order, as hm_comm_shrink or hm_comm_split (color by survival, key 0)
 * make them. Places the same model on them by hm_plan_create's rules, keeping tp:
 *  - a data-parallel replica that lost a rank is taken out whole while at least one replica is
 *    left whole: every other rank keeps its stage and layers, nothing moves, the lost replica's
 *    survivors become spares;
 *  - otherwise the stages are re-cut: each island holds the whole stages of tp x dp ranks its
 *    survivors can form (an island that lost nothing keeps its stages), the layers are split
 *    again, and dp (at most the old one) is the fastest predicted that fits in memory;
 *  - the global batch is kept: its global_batch / micro_batch micro-batches divide over the
 *    replicas left, the first (global_batch / micro_batch) % dp replicas taking one more (a
 *    trainer then sums gradients and divides by the global batch instead of averaging replicas).
 * Every survivor computes the same plan locally. Why newworld and no list of survivors: each
 * survivor knows its own rank in plan's world, so one allgather over newworld tells all of them
 * which old rank each member was, whichever way newworld was made, and checks that they all hold
 * the same plan (HM_ERR_MISMATCH otherwise); host names cannot, as a host runs several ranks.
 * Fails with HM_ERR_INVALID_ARGUMENT when newworld is not plan's ranks in their order, when the
 * naive placement is selected, or, saying why for each shape tried, when the model no longer
 * fits on the survivors. newworld must outlive the new plan's communicators; plan stays valid. */
HM_API hm_status_t hm_plan_replan(hm_plan_t plan, hm_comm_t newworld, hm_plan_t* newplan);

/* Layers [first_layer, first_layer + num_layers) of a rank's tensor-parallel shard, and the rank
 * (of the re-planned world) that held that shard of them in the old plan: their current weights
 * and optimizer state are there. rank -1: no survivor held them (load them from a checkpoint). */
typedef struct hm_layer_source {
  int first_layer;
  int num_layers;
  int rank;
} hm_layer_source_t;

/* For `rank` of the plan's world (any rank, so that a source can find who fetches from it): the
 * layers it holds in this re-plan and did not hold before, in layer order, as ranges with their
 * source (the one in its own island when there is one, else the lowest rank). Writes at most
 * capacity entries; *count receives how many there are. A plan from hm_plan_create has none.
 * sources may be NULL with capacity 0 to ask for the count. */
HM_API hm_status_t hm_plan_get_layer_sources(hm_plan_t plan, int rank, hm_layer_source_t* sources,
                                             size_t capacity, size_t* count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HOLMES_HOLMES_H_ */
