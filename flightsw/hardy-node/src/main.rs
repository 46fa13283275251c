//! swarm-hardy: one DTN node on Hardy's crates (hardy-bpa's bundle processing agent, hardy-tcpclv4's
//! convergence layer), the framework's second agent beside dtn7-rs.
//!
//!     swarm-hardy --node sat02 --listen 10.0.0.2:4556 --http 3000 --peer sat01@10.0.0.1:4556 --service in
//!     swarm-hardy --node ipn:2.0 --listen 10.0.0.2:4556 --http 3000 --peer ipn:1.0@10.0.0.1:4556 --service 1
//!
//! - The node ID is dtn://<node>/ (a bare name) like dtn7's nodes, so mixed swarms address each other alike, or
//!   the node ID given (`ipn:<number>.0`: services are then numbers, and the node sends from service 2).
//! - TCPCLv4 listens on the node's ISL address; each `--peer` is dialled and re-dialled whenever its session is
//!   gone (Hardy's CLA dials only when asked). A session adds a route to the peer's node ID (hardy-bpa does that).
//! - Applications use a small HTTP/1.1 API on loopback, the subset of dtn7's that the framework's traffic program
//!   speaks: POST /send?dst=EID&lifetime=Ns (body = payload), GET /endpoint?SERVICE (the next whole bundle
//!   delivered to the node's SERVICE, or "Nothing to receive"), GET /status/{nodeid,peers,info,store} (store: the IDs of the bundles held).
//! - `--window N`: TCPCL transfers in flight per session (hardy-tcpclv4 as patched at build time:
//!   images/hardy/hardy-tcpclv4-0.4.0.patch) and bundles handed to the CLA at once per peer (WindowPolicy);
//!   1, the default, is Hardy's published behaviour: the next bundle after the previous one's final XFER_ACK.
//! - One line per event on stdout (`<epoch s> <kind> ...`), which the adapter's log parser reads.
use hardy_bpa::bpa::{Bpa, BpaRegistration};
use hardy_bpa::bundle::{Bundle as BpaBundle, BundleMetadata, BundleStatus};
use hardy_bpa::cla::{self, ClaAddress, ClaAddressType, ForwardBundleResult};
use hardy_bpa::policy;
use hardy_bpa::services::{self, ApplicationSink, StatusNotify};
use hardy_bpa::storage;
use hardy_bpa::stream::Sender as StreamSender;
use hardy_bpa::{Bytes, async_trait};
use hardy_bpv7::bundle::Id as BundleId;
use hardy_bpv7::eid::{Eid, NodeId, Service as ServiceId};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the node counts and holds for its applications.
#[derive(Default)]
struct State {
    created: AtomicU64,
    delivered: AtomicU64,
    forwarded: AtomicU64,
    received: AtomicU64,
    failed: AtomicU64,
    peers: Mutex<HashMap<ClaAddress, Vec<String>>>,
    inbox: Mutex<HashMap<String, VecDeque<Bytes>>>,
    sender: OnceLock<Box<dyn ApplicationSink>>,
    /// The bundles the BPA holds (GET /status/store), kept by ListedStore.
    held: Arc<Mutex<HashSet<hardy_bpv7::bundle::Id>>>,
}

fn event(text: std::fmt::Arguments) {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    println!("{:.6} {text}", t.as_secs_f64());
}

impl State {
    fn peer_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .peers
            .lock()
            .unwrap()
            .values()
            .flatten()
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The most transfers in flight `--window` takes (the framework's dtn.tcpcl.window allows up to 1,024).
const MAX_WINDOW: usize = 1024;

/// Up to `window` bundles handed to the CLA at once per peer. hardy-bpa's egress queue forwards one bundle and
/// awaits its result before it takes the next, and a TCPCL result comes with the final XFER_ACK, so without
/// this a windowed session still carries one bundle per round trip. Each forward runs as a task holding one of
/// `window` slots; the queue's poller waits for a free slot, so no more than `window` are in flight.
/// A bundle already in flight is not forwarded twice: hardy-bpa's store channel, once congested, re-reads every
/// bundle still ForwardPending from storage (its storage/channel.rs says a bundle may come twice), which is each
/// one in flight here (seen: 100 bundles Hardy -> dtn7 at 100 ms round trip made 203 duplicates). A copy that
/// comes after its forward ended finds its data gone and is dropped by hardy-bpa itself (load_data_or_drop); one
/// whose forward failed is routed again and comes back as new. ListedStore leaves the bundles in flight out of
/// those re-reads, so a re-read brings the next bundles instead.
struct WindowPolicy {
    window: usize,
    in_flight: InFlight,
}

/// The bundles whose forward is running, by (ID, peer): shared by the window's controllers and ListedStore.
type InFlight = Arc<Mutex<HashSet<(BundleId, u32)>>>;

struct WindowController {
    queue: Arc<dyn policy::EgressQueue>,
    slots: Arc<tokio::sync::Semaphore>,
    in_flight: InFlight,
}

#[async_trait]
impl policy::EgressPolicy for WindowPolicy {
    fn queue_count(&self) -> u32 {
        0 // one FIFO queue per peer, as hardy-bpa's null policy
    }

    fn classify(&self, _flow_label: Option<u32>) -> Option<u32> {
        None
    }

    async fn new_controller(
        &self,
        queues: HashMap<Option<u32>, Arc<dyn policy::EgressQueue>>,
    ) -> Arc<dyn policy::EgressController> {
        let queue = queues
            .get(&None)
            .cloned()
            .expect("hardy-bpa gives every peer its default queue");
        Arc::new(WindowController {
            queue,
            slots: Arc::new(tokio::sync::Semaphore::new(self.window)),
            in_flight: self.in_flight.clone(),
        })
    }
}

#[async_trait]
impl policy::EgressController for WindowController {
    async fn forward(&self, _queue: Option<u32>, bundle: hardy_bpa::bundle::Bundle) {
        let BundleStatus::ForwardPending { peer, .. } = bundle.metadata.status else {
            return self.queue.forward(bundle).await; // not a queued bundle: hardy-bpa's own path
        };
        let id = (bundle.bundle.id.clone(), peer);
        if !self.in_flight.lock().unwrap().insert(id.clone()) {
            return; // this bundle's forward is running: the store offered it again
        }
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            self.in_flight.lock().unwrap().remove(&id);
            return; // never closed
        };
        let (queue, in_flight) = (self.queue.clone(), self.in_flight.clone());
        tokio::spawn(async move {
            queue.forward(bundle).await;
            in_flight.lock().unwrap().remove(&id);
            drop(slot);
        });
    }
}

/// Hardy's TCPCLv4 CLA, counted: every bundle it hands in or sends, every session it opens or loses.
struct CountedCla {
    inner: Arc<hardy_tcpclv4::Cla>,
    state: Arc<State>,
}

struct CountedSink {
    inner: Box<dyn cla::Sink>,
    state: Arc<State>,
}

#[async_trait]
impl cla::Sink for CountedSink {
    async fn unregister(&self) {
        self.inner.unregister().await
    }

    async fn dispatch(
        &self,
        bundle: Bytes,
        node: Option<&NodeId>,
        addr: Option<&ClaAddress>,
    ) -> cla::Result<()> {
        self.state.received.fetch_add(1, Relaxed);
        let from = node.map(|n| n.to_string()).unwrap_or_default();
        event(format_args!("received bytes={} from={from}", bundle.len()));
        self.inner.dispatch(bundle, node, addr).await
    }

    async fn add_peer(&self, addr: ClaAddress, node_ids: &[NodeId]) -> cla::Result<bool> {
        let names: Vec<String> = node_ids.iter().map(|n| n.to_string()).collect();
        event(format_args!("peer-up {addr} {}", names.join(",")));
        self.state.peers.lock().unwrap().insert(addr.clone(), names);
        self.inner.add_peer(addr, node_ids).await
    }

    async fn remove_peer(&self, addr: &ClaAddress) -> cla::Result<bool> {
        event(format_args!("peer-down {addr}"));
        self.state.peers.lock().unwrap().remove(addr);
        self.inner.remove_peer(addr).await
    }
}

#[async_trait]
impl cla::Cla for CountedCla {
    async fn on_register(&self, sink: Box<dyn cla::Sink>, node_ids: &[NodeId]) {
        let sink = Box::new(CountedSink {
            inner: sink,
            state: self.state.clone(),
        });
        self.inner.on_register(sink, node_ids).await
    }

    async fn on_unregister(&self) {
        self.inner.on_unregister().await
    }

    fn address_type(&self) -> Option<ClaAddressType> {
        self.inner.address_type()
    }

    fn queue_count(&self) -> u32 {
        self.inner.queue_count()
    }

    async fn forward(
        &self,
        queue: Option<u32>,
        addr: &ClaAddress,
        bundle: Bytes,
    ) -> cla::Result<ForwardBundleResult> {
        let len = bundle.len();
        let res = self.inner.forward(queue, addr, bundle).await;
        if let Ok(ForwardBundleResult::Sent) = res {
            self.state.forwarded.fetch_add(1, Relaxed);
            event(format_args!("forwarded bytes={len} to={addr}"));
        } else {
            self.state.failed.fetch_add(1, Relaxed);
            event(format_args!("failed bytes={len} to={addr}"));
        }
        res
    }
}

/// One service of the node (dtn://<node>/<name>): keeps each whole bundle for GET /endpoint. It holds its sink:
/// dropping that would unregister the service.
struct Inbox {
    name: String,
    state: Arc<State>,
    sink: OnceLock<Box<dyn services::ServiceSink>>,
}

#[async_trait]
impl services::Service for Inbox {
    async fn on_register(&self, _: &Eid, sink: Box<dyn services::ServiceSink>) {
        let _ = self.sink.set(sink);
    }
    async fn on_unregister(&self) {}

    async fn on_receive(&self, data: Bytes, _: time::OffsetDateTime) -> services::Result<()> {
        self.state.delivered.fetch_add(1, Relaxed);
        event(format_args!(
            "delivered service={} bytes={}",
            self.name,
            data.len()
        ));
        self.state
            .inbox
            .lock()
            .unwrap()
            .entry(self.name.clone())
            .or_default()
            .push_back(data);
        Ok(())
    }

    async fn on_status_notify(
        &self,
        _: &hardy_bpv7::bundle::Id,
        _: &Eid,
        _: StatusNotify,
        _: hardy_bpv7::status_report::ReasonCode,
        _: Option<time::OffsetDateTime>,
    ) {
    }
}

/// The node's own sending application (its sink creates bundles from POST /send).
struct Sender(Arc<State>);

#[async_trait]
impl services::Application for Sender {
    async fn on_register(&self, _: &Eid, sink: Box<dyn ApplicationSink>) {
        let _ = self.0.sender.set(sink);
    }
    async fn on_unregister(&self) {}
    async fn on_receive(
        &self,
        _: Eid,
        _: time::OffsetDateTime,
        _: bool,
        _: Bytes,
    ) -> services::Result<()> {
        Ok(())
    }
    async fn on_status_notify(
        &self,
        _: &hardy_bpv7::bundle::Id,
        _: &Eid,
        _: StatusNotify,
        _: hardy_bpv7::status_report::ReasonCode,
        _: Option<time::OffsetDateTime>,
    ) {
    }
}

struct Args {
    node: NodeId,
    listen: SocketAddr,
    http: u16,
    peers: Vec<(NodeId, SocketAddr)>,
    services: Vec<String>,
    routes: Vec<(String, String)>,
    segment_mru: u64,
    keepalive: u16,
    window: usize,
    debug: bool,
    accept_no_crc: bool,
}

fn parse_args() -> Res<Args> {
    let mut node = String::new();
    let mut a = Args {
        node: NodeId::LocalNode,
        listen: "0.0.0.0:4556".parse()?,
        http: 3000,
        peers: vec![],
        services: vec![],
        routes: vec![],
        segment_mru: 64000,
        keepalive: 30,
        window: 1,
        debug: false,
        accept_no_crc: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag}: needs a value"))?;
        match flag.as_str() {
            "--node" => node = v,
            "--listen" => a.listen = v.parse().map_err(|e| format!("--listen {v}: {e}"))?,
            "--http" => a.http = v.parse().map_err(|e| format!("--http {v}: {e}"))?,
            "--peer" => {
                let (name, addr) = v
                    .split_once('@')
                    .ok_or_else(|| format!("--peer {v}: want NODE@IP:PORT"))?;
                a.peers.push((
                    node_id(name).map_err(|e| format!("--peer {v}: {e}"))?,
                    addr.parse().map_err(|e| format!("--peer {v}: {e}"))?,
                ));
            }
            "--service" => a.services.push(v),
            "--route" => {
                let (to, via) = v
                    .split_once('=')
                    .ok_or_else(|| format!("--route {v}: want PATTERN=VIA-EID"))?;
                a.routes.push((to.to_string(), via.to_string()));
            }
            "--segment-mru" => {
                a.segment_mru = v.parse().map_err(|e| format!("--segment-mru {v}: {e}"))?
            }
            "--debug" => a.debug = v == "1",
            "--accept-no-crc" => a.accept_no_crc = v == "1",
            "--keepalive" => {
                a.keepalive = v.parse().map_err(|e| format!("--keepalive {v}: {e}"))?
            }
            "--window" => {
                a.window = v
                    .parse()
                    .ok()
                    .filter(|w| (1..=MAX_WINDOW).contains(w))
                    .ok_or_else(|| format!("--window {v}: want 1..{MAX_WINDOW}"))?
            }
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    if node.is_empty() {
        return Err("--node: required".into());
    }
    a.node = node_id(&node).map_err(|e| format!("--node {node}: {e}"))?;
    Ok(a)
}

/// A node ID from a bare name (dtn://<name>/) or a node ID as written (dtn://<name>/, ipn:<number>.0).
fn node_id(text: &str) -> Res<NodeId> {
    let id = if text.contains(':') {
        text.to_string()
    } else {
        format!("dtn://{text}/")
    };
    Ok(NodeId::try_from(id.as_str())?)
}

/// A service of this node by its name in the API: a dtn service name, or an ipn service number (> 0).
fn service_id(node: &NodeId, name: &str) -> Res<ServiceId> {
    match node {
        NodeId::Ipn(_) => match name.parse::<u32>() {
            Ok(n) if n > 0 => Ok(ServiceId::Ipn(n)),
            _ => Err(format!("service {name}: an ipn node's services are numbers > 0").into()),
        },
        _ if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c)) =>
        {
            Ok(ServiceId::Dtn(name.into()))
        }
        _ => Err(format!("service {name}: bad service name").into()),
    }
}

/// The service the node's own sending application registers: dtn://<node>/send, or ipn:<number>.2.
fn send_service(node: &NodeId) -> ServiceId {
    match node {
        NodeId::Ipn(_) => ServiceId::Ipn(2),
        _ => ServiceId::Dtn("send".into()),
    }
}

/// Dial `addr` whenever no session to node `want` is up (Hardy's CLA dials only when asked).
async fn keep_dialling(
    cla: Arc<hardy_tcpclv4::Cla>,
    state: Arc<State>,
    peer: NodeId,
    addr: SocketAddr,
) {
    let want = peer.to_string();
    let name = &want;
    loop {
        if !state.peer_names().contains(&want)
            && let Err(e) = cla.connect(&addr).await
        {
            event(format_args!("dial-failed {name} {addr}: {e}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn query(target: &str) -> (&str, &str) {
    target.split_once('?').unwrap_or((target, ""))
}

fn param<'a>(q: &'a str, key: &str) -> Option<&'a str> {
    q.split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// One HTTP request: (status, body).
async fn answer(
    bpa: &Bpa,
    state: &Arc<State>,
    node: &NodeId,
    method: &str,
    target: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let (path, q) = query(target);
    match (method, path) {
        ("POST", "/send") => {
            let (Some(dst), Some(sender)) = (param(q, "dst"), state.sender.get()) else {
                return (400, b"want /send?dst=EID&lifetime=Ns".to_vec());
            };
            let Ok(dst) = Eid::try_from(dst) else {
                return (400, format!("bad dst {dst}").into_bytes());
            };
            let life = param(q, "lifetime")
                .and_then(|l| l.trim_end_matches('s').parse::<u64>().ok())
                .unwrap_or(3600);
            match sender
                .send(
                    dst.clone(),
                    Bytes::from(body),
                    Duration::from_secs(life),
                    None,
                )
                .await
            {
                Ok(id) => {
                    state.created.fetch_add(1, Relaxed);
                    let bid = bundle_id(&id);
                    event(format_args!("created {bid} dst={dst}"));
                    (200, bid.into_bytes())
                }
                Err(e) => (500, e.to_string().into_bytes()),
            }
        }
        ("GET", "/endpoint") => {
            if !state.inbox.lock().unwrap().contains_key(q)
                && register_inbox(bpa, state, node, q).await.is_err()
            {
                return (400, format!("bad service {q}").into_bytes());
            }
            match state
                .inbox
                .lock()
                .unwrap()
                .get_mut(q)
                .and_then(|b| b.pop_front())
            {
                Some(b) => (200, b.to_vec()),
                None => (200, b"Nothing to receive".to_vec()),
            }
        }
        ("GET", "/status/nodeid") => (200, node.to_string().into_bytes()),
        ("GET", "/status/peers") => (200, json_list(&state.peer_names())),
        ("GET", "/status/store") => {
            let mut ids: Vec<String> = state.held.lock().unwrap().iter().map(bundle_id).collect();
            ids.sort();
            (200, json_list(&ids))
        }
        ("GET", "/status/info") => {
            let n = |c: &AtomicU64| c.load(Relaxed);
            let text = format!(
                "{{\"created\":{},\"delivered\":{},\"forwarded\":{},\"received\":{},\"failed\":{}}}",
                n(&state.created),
                n(&state.delivered),
                n(&state.forwarded),
                n(&state.received),
                n(&state.failed)
            );
            (200, text.into_bytes())
        }
        _ => (404, b"not found".to_vec()),
    }
}

/// hardy-bpa's in-memory metadata store, which lists nothing, with the IDs of the bundles it holds beside it:
/// an ID is held from its metadata's insertion until its tombstone (delivered, forwarded, expired or dropped).
/// Every call goes to the inner store unchanged but poll_pending, which leaves out the bundles in flight.
struct ListedStore {
    inner: storage::MetadataMemStorage,
    held: Arc<Mutex<HashSet<BundleId>>>,
    in_flight: InFlight,
}

/// A stream that keeps what it is sent (the inner store's poll, filtered before it goes on).
#[derive(Default)]
struct Collected(Mutex<Vec<BpaBundle>>);

#[async_trait]
impl StreamSender<BpaBundle> for Collected {
    async fn send(&self, item: BpaBundle) -> Result<(), hardy_bpa::stream::SendError<BpaBundle>> {
        self.0.lock().unwrap().push(item);
        Ok(())
    }
}

#[async_trait]
impl storage::MetadataStorage for ListedStore {
    async fn get(&self, id: &BundleId) -> storage::Result<Option<BpaBundle>> {
        self.inner.get(id).await
    }
    async fn insert(&self, bundle: &BpaBundle) -> storage::Result<bool> {
        let new = self.inner.insert(bundle).await?;
        if new {
            self.held.lock().unwrap().insert(bundle.bundle.id.clone());
        }
        Ok(new)
    }
    async fn replace(&self, bundle: &BpaBundle) -> storage::Result<()> {
        self.inner.replace(bundle).await
    }
    async fn update_status(&self, bundle: &BpaBundle) -> storage::Result<()> {
        self.inner.update_status(bundle).await
    }
    async fn tombstone(&self, id: &BundleId) -> storage::Result<()> {
        self.held.lock().unwrap().remove(id);
        self.inner.tombstone(id).await
    }
    async fn start_recovery(&self) {
        self.inner.start_recovery().await
    }
    async fn confirm_exists(&self, id: &BundleId) -> storage::Result<Option<BundleMetadata>> {
        self.inner.confirm_exists(id).await
    }
    async fn remove_unconfirmed(
        &self,
        stream: &dyn StreamSender<BpaBundle>,
    ) -> storage::Result<()> {
        self.inner.remove_unconfirmed(stream).await
    }
    async fn reset_peer_queue(&self, peer: u32) -> storage::Result<u64> {
        self.inner.reset_peer_queue(peer).await
    }
    async fn poll_expiry(
        &self,
        stream: &dyn StreamSender<BpaBundle>,
        limit: usize,
    ) -> storage::Result<()> {
        self.inner.poll_expiry(stream, limit).await
    }
    async fn poll_waiting(&self, stream: &dyn StreamSender<BpaBundle>) -> storage::Result<()> {
        self.inner.poll_waiting(stream).await
    }
    async fn poll_service_waiting(
        &self,
        source: Eid,
        stream: &dyn StreamSender<BpaBundle>,
    ) -> storage::Result<()> {
        self.inner.poll_service_waiting(source, stream).await
    }
    async fn poll_adu_fragments(
        &self,
        stream: &dyn StreamSender<BpaBundle>,
        status: &BundleStatus,
    ) -> storage::Result<()> {
        self.inner.poll_adu_fragments(stream, status).await
    }
    async fn poll_pending(
        &self,
        stream: &dyn StreamSender<BpaBundle>,
        status: &BundleStatus,
        limit: usize,
    ) -> storage::Result<()> {
        // A peer's queue, once congested, re-reads its `limit` oldest pending bundles from the store while any
        // come back (hardy-bpa's storage/channel.rs); with a window those are the bundles in flight, which the
        // controller drops as repeats, so the poller spun on them (58 % of swarm-hardy's CPU, Hardy -> dtn7 at
        // 100 ms round trip). Asked for that many more and given the first `limit` not in flight, it brings the
        // next bundles, and stops when only bundles in flight are left (a new one wakes it again).
        let flying = self.in_flight.lock().unwrap().len();
        let (BundleStatus::ForwardPending { peer, .. }, 1..) = (status, flying) else {
            return self.inner.poll_pending(stream, status, limit).await; // not a peer queue, or nothing in flight
        };
        let got = Collected::default();
        self.inner
            .poll_pending(&got, status, limit + flying)
            .await?;
        let got = got.0.into_inner().unwrap();
        let fresh: Vec<BpaBundle> = {
            let in_flight = self.in_flight.lock().unwrap();
            got.into_iter()
                .filter(|b| !in_flight.contains(&(b.bundle.id.clone(), *peer)))
                .take(limit)
                .collect()
        };
        for b in fresh {
            if stream.send(b).await.is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// A bundle's ID as one word, like dtn7's: <source>-<creation ms>-<sequence>.
fn bundle_id(id: &hardy_bpv7::bundle::Id) -> String {
    let ms = id
        .timestamp
        .creation_time()
        .map(|t| t.millisecs())
        .unwrap_or(0);
    format!("{}-{ms}-{}", id.source, id.timestamp.sequence_number())
}

fn json_list(items: &[String]) -> Vec<u8> {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(",")).into_bytes()
}

/// Routes beyond the peers (`--route PATTERN=VIA`, e.g. dtn://sat03/**=dtn://sat02/): bundles to PATTERN go
/// through node VIA (a peer, or itself routed). Priority 100: a session's own route to a peer (0) and the node's
/// services (1) come first.
fn static_routes(routes: &[(String, String)]) -> Res<hardy_bpa::routing::StaticRoutingAgent> {
    use hardy_bpa::routing::RouteAction;
    let mut table = vec![];
    for (to, via) in routes {
        let pattern: hardy_eid_patterns::EidPattern =
            to.parse().map_err(|e| format!("--route {to}: {e:?}"))?;
        let via = Eid::try_from(via.as_str()).map_err(|e| format!("--route {to}={via}: {e}"))?;
        table.push((pattern, RouteAction::Via(via), 100));
    }
    Ok(hardy_bpa::routing::StaticRoutingAgent::new(&table))
}

/// Hardy's RFC 9171 filter, with its primary-block integrity check off (`--accept-no-crc 1`), for peers that send
/// primary blocks without the CRC RFC 9171 section 4.3.1 requires, e.g. the published dtn7-rs 0.21.0 (the
/// framework's patched dtn7 sets one and does not pass the option).
fn accept_primary_without_crc(bpa: &Bpa) -> Res<()> {
    use hardy_bpa::filter::{Filter, Hook, rfc9171};
    let name = "rfc9171-validity";
    bpa.unregister_filter(Hook::Ingress, name)?;
    let config = rfc9171::Config {
        primary_block_integrity: false,
        ..Default::default()
    };
    let filter = Filter::Read(Arc::new(rfc9171::Rfc9171ValidityFilter::new(&config)));
    bpa.register_filter(Hook::Ingress, name, &[], filter)?;
    Ok(())
}

async fn register_inbox(bpa: &Bpa, state: &Arc<State>, node: &NodeId, name: &str) -> Res<()> {
    let service = service_id(node, name)?;
    state
        .inbox
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_default();
    let inbox = Arc::new(Inbox {
        name: name.to_string(),
        state: state.clone(),
        sink: OnceLock::new(),
    });
    bpa.register_service(service, inbox).await?;
    Ok(())
}

/// HTTP/1.1 with keep-alive on one loopback connection; enough for the framework's clients.
async fn serve_http(
    stream: tokio::net::TcpStream,
    bpa: Arc<Bpa>,
    state: Arc<State>,
    node: Arc<NodeId>,
) -> Res<()> {
    stream.set_nodelay(true)?;
    let mut rd = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut words = line.split_whitespace();
        let (method, target) = (
            words.next().unwrap_or("").to_string(),
            words.next().unwrap_or("/").to_string(),
        );
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            rd.read_line(&mut header).await?;
            if header.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse()?;
            }
        }
        let mut body = vec![0u8; length];
        rd.read_exact(&mut body).await?;
        let (status, out) = answer(&bpa, &state, &node, &method, &target, body).await;
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
            out.len()
        );
        // one write: a small head then the body would wait ~40 ms for the client's delayed ACK (Nagle)
        let mut answer = head.into_bytes();
        answer.extend_from_slice(&out);
        rd.get_mut().write_all(&answer).await?;
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("swarm-hardy: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("swarm-hardy: {e}");
        std::process::exit(1);
    }
}

/// Hardy's own policy (None) for window 1, else WindowPolicy.
fn egress_policy(window: usize, in_flight: InFlight) -> Option<Arc<dyn policy::EgressPolicy>> {
    (window > 1)
        .then(|| Arc::new(WindowPolicy { window, in_flight }) as Arc<dyn policy::EgressPolicy>)
}

async fn run(args: Args) -> Res<()> {
    if args.debug {
        // Hardy's own trace (large): why a bundle waits, is dropped or a session ends
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .init();
    }
    let state = Arc::new(State::default());
    let node_id = args.node.clone();
    let config = hardy_tcpclv4::config::Config {
        address: Some(args.listen),
        segment_mru: args.segment_mru,
        session_defaults: hardy_tcpclv4::config::SessionConfig {
            keepalive_interval: Some(args.keepalive),
            transfer_window: args.window,
            ..Default::default()
        },
        ..Default::default()
    };
    let tcpcl = Arc::new(hardy_tcpclv4::Cla::new(&config)?);
    let counted = Arc::new(CountedCla {
        inner: tcpcl.clone(),
        state: state.clone(),
    });
    let in_flight = InFlight::default();
    let listed = Arc::new(ListedStore {
        inner: storage::MetadataMemStorage::new(&Default::default()),
        held: state.held.clone(),
        in_flight: in_flight.clone(),
    });
    let bpa = Bpa::builder()
        .metadata_storage(listed)
        .routing_agent("static", Arc::new(static_routes(&args.routes)?))
        .node_ids(hardy_bpa::node_ids::NodeIds::try_from(&[node_id][..])?)
        .cla("tcp", counted, egress_policy(args.window, in_flight))
        .build()
        .await?;
    if args.accept_no_crc {
        accept_primary_without_crc(&bpa)?;
    }
    bpa.start(false);
    let bpa = Arc::new(bpa);
    for s in &args.services {
        register_inbox(&bpa, &state, &args.node, s).await?;
    }
    // the source of the bundles it sends: dtn://<node>/send or ipn:<number>.2
    let sender = Arc::new(Sender(state.clone()));
    bpa.register_application(send_service(&args.node), sender)
        .await?;
    for (name, addr) in args.peers {
        tokio::spawn(keep_dialling(tcpcl.clone(), state.clone(), name, addr));
    }
    let http = tokio::net::TcpListener::bind(("127.0.0.1", args.http)).await?;
    event(format_args!(
        "ready {} tcpcl={} http=127.0.0.1:{}",
        args.node, args.listen, args.http
    ));
    let node = Arc::new(args.node);
    loop {
        tokio::select! {
            conn = http.accept() => {
                let (stream, _) = conn?;
                tokio::spawn(serve_http(stream, bpa.clone(), state.clone(), node.clone()));
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    bpa.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::MetadataStorage;

    const PEER: u32 = 7;

    fn queued(n: u32) -> BpaBundle {
        let mut b = BpaBundle {
            bundle: hardy_bpv7::bundle::Bundle {
                id: BundleId {
                    source: format!("ipn:1.{n}").parse().unwrap(),
                    timestamp: Default::default(),
                    fragment_info: None,
                },
                flags: Default::default(),
                crc_type: Default::default(),
                destination: "ipn:2.1".parse().unwrap(),
                report_to: Default::default(),
                lifetime: Duration::from_secs(3600),
                previous_node: None,
                age: None,
                hop_count: None,
                blocks: Default::default(),
            },
            metadata: Default::default(),
        };
        b.metadata.status = queue_of(PEER);
        b.metadata.read_only.received_at =
            time::OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(n.into());
        b
    }

    /// An empty store and its in-flight set.
    fn listed() -> (ListedStore, InFlight) {
        let in_flight = InFlight::default();
        let store = ListedStore {
            inner: storage::MetadataMemStorage::new(&Default::default()),
            held: Arc::default(),
            in_flight: in_flight.clone(),
        };
        (store, in_flight)
    }

    fn queue_of(peer: u32) -> BundleStatus {
        BundleStatus::ForwardPending { peer, queue: None }
    }

    fn fly(in_flight: &InFlight, n: u32, peer: u32) {
        in_flight
            .lock()
            .unwrap()
            .insert((queued(n).bundle.id.clone(), peer));
    }

    async fn polled(store: &ListedStore, status: &BundleStatus, limit: usize) -> Vec<u32> {
        let got = Collected::default();
        store.poll_pending(&got, status, limit).await.unwrap();
        let got = got.0.into_inner().unwrap();
        got.iter()
            .map(|b| b.metadata.read_only.received_at.unix_timestamp() as u32)
            .collect()
    }

    #[tokio::test]
    async fn a_poll_skips_the_bundles_in_flight_to_that_peer_and_brings_the_next_oldest() {
        let (store, in_flight) = listed();
        for n in 1..=10 {
            assert!(store.insert(&queued(n)).await.unwrap());
        }
        let pending = queue_of(PEER);
        assert_eq!(polled(&store, &pending, 3).await, [1, 2, 3]); // nothing in flight: hardy-bpa's own order
        for n in [1, 2, 3, 5] {
            fly(&in_flight, n, PEER);
        }
        fly(&in_flight, 4, PEER + 1); // in flight to another peer: not this queue's
        assert_eq!(polled(&store, &pending, 3).await, [4, 6, 7]);
        assert_eq!(polled(&store, &pending, 100).await, [4, 6, 7, 8, 9, 10]);
        assert!(polled(&store, &queue_of(PEER + 1), 3).await.is_empty()); // none queued there
    }

    #[tokio::test]
    async fn a_poll_with_only_bundles_in_flight_left_brings_none() {
        let (store, in_flight) = listed();
        for n in 1..=4 {
            store.insert(&queued(n)).await.unwrap();
            fly(&in_flight, n, PEER);
        }
        let pending = queue_of(PEER);
        assert!(polled(&store, &pending, 16).await.is_empty()); // the queue's poller stops, a new bundle wakes it
    }
}
