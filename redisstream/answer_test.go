package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/redisstream"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func newAnswerer(t *testing.T, rdb redis.UniversalClient, group, consumer string) *redisstream.Publisher {
	t.Helper()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: group, Consumer: consumer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// An answer is written only while the entry it answers is pending to the publisher's consumer, to the
// partition of the topic its question was read from; the other messages of the same Publish are written as
// usual, and PublishErrors names the answer that was not, with ErrNotPending. What a subscriber of the answers
// reads is the answer as published: its UUID, payload and metadata, without the mark.
func TestAnAnswerIsWrittenOnlyWhileItsEntryIsPendingToTheConsumer(t *testing.T) {
	rdb := redistest.Start(t).Client()
	for i := range 2 {
		publish(t, rdb, redisstream.PartitionTopic("orders", i), 1)
	}
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
		Partitions: 2}), "orders")
	questions := map[string]*message.Message{}
	for range 2 {
		q := receive(t, out)
		questions[redisstream.Stream(q)] = q
	}
	kept, claimed := questions[redisstream.PartitionTopic("orders", 0)], questions[redisstream.PartitionTopic("orders", 1)]
	// Another consumer claims one entry, as after the claim idle time.
	if err := rdb.XClaim(t.Context(), &redis.XClaimArgs{Stream: redisstream.Stream(claimed), Group: "g",
		Consumer: "other", Messages: []string{redisstream.EntryID(claimed)}}).Err(); err != nil {
		t.Fatal(err)
	}
	answer := func(q *message.Message) *message.Message {
		a := message.NewMessage(watermill.NewUUID(), []byte("answer to "+redisstream.EntryID(q)))
		a.Metadata.Set("k", "v")
		redisstream.Answer(a, q)
		return a
	}
	toKept, toClaimed := answer(kept), answer(claimed)
	plain := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	err := newAnswerer(t, rdb, "g", "c").Publish("results", toKept, toClaimed, plain)

	var failed redisstream.PublishErrors
	if !errors.As(err, &failed) || len(failed) != 3 || failed[0] != nil || !errors.Is(failed[1], redisstream.ErrNotPending) ||
		failed[2] != nil || !errors.Is(err, redisstream.ErrNotPending) {
		t.Fatalf("Publish: %v, want PublishErrors with ErrNotPending for the claimed entry's answer alone", err)
	}
	if n := rdb.XLen(t.Context(), redisstream.PartitionTopic("results", 1)).Val(); n != 0 {
		t.Errorf("%d answers in the claimed entry's partition, want none", n)
	}
	if n := rdb.XLen(t.Context(), "results").Val(); n != 1 {
		t.Errorf("%d messages in the topic itself, want the plain one", n)
	}
	got := receive(t, subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "readers"}),
		redisstream.PartitionTopic("results", 0)))
	if got.UUID != toKept.UUID || string(got.Payload) != string(toKept.Payload) || got.Metadata.Get("k") != "v" {
		t.Errorf("read %s %q %v, want the answer to the kept entry in its partition of the topic", got.UUID, got.Payload, got.Metadata)
	}
	if md, _ := rdb.XRange(t.Context(), redisstream.PartitionTopic("results", 0), "-", "+").Val()[0].Values["metadata"].(string); strings.Contains(md, redisstream.MetadataAnswers) {
		t.Errorf("the entry's metadata %q holds the answer's mark", md)
	}
}

// Whether a question came from a partition is what its subscription says, not its stream's name: the answer
// to an entry of an unpartitioned topic named like a partition ("x:{0}") goes to the answers' topic itself.
func TestAnAnswerToAnUnpartitionedTopicGoesToTheTopicWhateverItsName(t *testing.T) {
	rdb := redistest.Start(t).Client()
	publish(t, rdb, "x:{0}", 1)
	q := receive(t, subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}), "x:{0}"))
	a := message.NewMessage(watermill.NewUUID(), []byte("answer"))
	redisstream.Answer(a, q)
	if err := newAnswerer(t, rdb, "g", "c").Publish("results", a); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(t.Context(), "results").Val(); n != 1 {
		t.Errorf("%d answers in the topic results, want 1 (results:{0} has %d)", n, rdb.XLen(t.Context(), "results:{0}").Val())
	}
}

// A question whose answer met ErrNotPending is the claimer's: under Watermill's contract the subscriber
// neither acks its entry when the handler acks it (XACK would take it from the claimer) nor hands it out
// again when the handler nacks it.
func TestAQuestionWhoseAnswerWasRefusedIsLeftToItsClaimer(t *testing.T) {
	for _, verdict := range []string{"ack", "nack"} {
		t.Run(verdict, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			publish(t, rdb, "questions", 1)
			sub := newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
				NackResendSleep: 10 * time.Millisecond})
			out := subscribe(t, sub, "questions")
			q := receive(t, out)
			if err := rdb.XClaim(t.Context(), &redis.XClaimArgs{Stream: "questions", Group: "g", Consumer: "other",
				Messages: []string{redisstream.EntryID(q)}}).Err(); err != nil {
				t.Fatal(err)
			}
			a := message.NewMessage(watermill.NewUUID(), []byte("answer"))
			redisstream.Answer(a, q)
			if err := newAnswerer(t, rdb, "g", "c").Publish("results", a); !errors.Is(err, redisstream.ErrNotPending) {
				t.Fatalf("Publish: %v, want ErrNotPending", err)
			}
			if q.Metadata.Get(redisstream.MetadataNotPending) == "" {
				t.Errorf("the question is not marked %s", redisstream.MetadataNotPending)
			}
			if verdict == "ack" {
				q.Ack()
			} else {
				q.Nack()
			}
			select {
			case again := <-out:
				t.Fatalf("the claimer's entry was handed out again: %s", again.UUID)
			case <-time.After(500 * time.Millisecond):
			}
			if err := sub.FlushAcks(t.Context()); err != nil {
				t.Fatal(err)
			}
			p, err := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: "questions", Group: "g", Start: "-", End: "+", Count: 10}).Result()
			if err != nil || len(p) != 1 || p[0].Consumer != "other" {
				t.Errorf("pending %v (%v), want the entry pending to its claimer", p, err)
			}
		})
	}
}

// An answer needs a publisher of a consumer, and a question a Subscriber handed out: anything else is refused
// before anything is written.
func TestAnAnswerThatCannotBeCheckedIsRefused(t *testing.T) {
	rdb := redistest.Start(t).Client()
	question := message.NewMessage(watermill.NewUUID(), nil)
	question.Metadata.Set(redisstream.MetadataStream, "orders")
	question.Metadata.Set(redisstream.MetadataEntryID, "1-1")
	a := message.NewMessage(watermill.NewUUID(), []byte("a"))
	redisstream.Answer(a, question)
	plainPub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plainPub.Publish("results", a); err == nil || !strings.Contains(err.Error(), "ConsumerGroup") {
		t.Errorf("a publisher without a consumer published an answer: %v", err)
	}
	stray := message.NewMessage(watermill.NewUUID(), []byte("b"))
	redisstream.Answer(stray, message.NewMessage(watermill.NewUUID(), nil))
	if err := newAnswerer(t, rdb, "g", "c").Publish("results", stray); err == nil || !strings.Contains(err.Error(), "no Subscriber") {
		t.Errorf("an answer to a message no subscriber handed out: %v", err)
	}
	if _, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: "g"}, nil); err == nil {
		t.Error("a ConsumerGroup without a Consumer was accepted")
	}
	if n := rdb.Exists(t.Context(), "results").Val(); n != 0 {
		t.Error("a refused Publish wrote to the topic")
	}
}

// On a Redis Cluster whose masters do not all know the answer script yet, the calls that met NOSCRIPT are
// sent again once it is loaded, and only those: a call that ran is not sent again, so every answer is
// written once.
func TestAReloadOfTheAnswerScriptSendsAgainOnlyTheCallsThatMetNOSCRIPT(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client()
	const n = 16
	home := redisstream.PartitionTopic("orders", 0)
	away := home
	for i := range n {
		if p := redisstream.PartitionTopic("orders", i); c.MasterOf(p).Addr != c.MasterOf(home).Addr {
			away = p
			break
		}
	}
	publish(t, rdb, home, 1)
	publish(t, rdb, away, 1)
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
		Partitions: n}), "orders")
	var answers []*message.Message
	for range 2 {
		q := receive(t, out)
		a := message.NewMessage(watermill.NewUUID(), []byte("a"))
		redisstream.Answer(a, q)
		answers = append(answers, a)
	}
	script, err := os.ReadFile("answer.lua")
	if err != nil {
		t.Fatal(err)
	}
	master := redis.NewClient(&redis.Options{Addr: c.MasterOf(home).Addr})
	defer master.Close()
	if err := master.ScriptLoad(t.Context(), string(script)).Err(); err != nil { // the home master alone knows it
		t.Fatal(err)
	}
	if err := newAnswerer(t, rdb, "g", "c").Publish("results", answers...); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, away} {
		results := strings.Replace(p, "orders", "results", 1)
		if got := rdb.XLen(t.Context(), results).Val(); got != 1 {
			t.Errorf("%s: %d answers, want 1", results, got)
		}
	}
}

// A call whose reply is lost and whose resend meets NOSCRIPT (a failover's new master, which has the old
// one's writes but not its script cache) is sent again under its request id once the script is loaded: it
// finds the note of its run and writes nothing twice.
func TestAnAnswerCallSentAgainAfterNOSCRIPTWritesOnce(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	publish(t, rdb, "orders", 3)
	out := subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}), "orders")
	var answers []*message.Message
	for range 3 {
		a := message.NewMessage(watermill.NewUUID(), []byte("a"))
		redisstream.Answer(a, receive(t, out))
		answers = append(answers, a)
	}
	dropper := redistest.NewReplyDropper(t, rdb.Options().Addr)
	opts := *rdb.Options()
	opts.Addr = dropper.Addr
	client := redis.NewClient(&opts)
	defer client.Close()
	pub := newAnswerer(t, client, "g", "c")
	// The script is known, so the first send runs; its reply is lost, and Redis forgets the script.
	warm := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	if err := pub.Publish("warm-up", warm); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptLoad(t.Context(), answerLua(t)).Err(); err != nil {
		t.Fatal(err)
	}
	dropper.DropReplyThen("results", 1, func() { rdb.ScriptFlush(context.Background()) })
	if err := pub.Publish("results", answers[:2]...); err != nil {
		t.Fatal(err)
	}
	if dropper.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want the answer call's", dropper.Dropped())
	}
	if n := rdb.XLen(t.Context(), "results").Val(); n != 2 {
		t.Errorf("%d answers for 2 entries after a lost reply and NOSCRIPT, want 2", n)
	}
	// The next call is a new one: it is not taken for the one before.
	if err := pub.Publish("results", answers[2]); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(t.Context(), "results").Val(); n != 3 {
		t.Errorf("%d answers after the next Publish, want 3", n)
	}
}

func answerLua(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("answer.lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// With ReplicaAcks a Publish returns nil only once the replicas have its writes (WAIT on their connection):
// with a replica online, the replica holds every message when Publish returns; with none, every message of
// the Publish, answers and plain ones, fails with ErrReplicaAcks (written on the master all the same).
func TestReplicaAcksMakeAPublishWaitForTheReplicas(t *testing.T) {
	for _, withReplica := range []bool{true, false} {
		t.Run(fmt.Sprintf("replica=%t", withReplica), func(t *testing.T) {
			master := redistest.Start(t)
			rdb := master.Client()
			var replica *redis.Client
			if withReplica {
				replica = startReplica(t, master).Client()
			}
			publish(t, rdb, "orders", 1)
			q := receive(t, subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}), "orders"))
			timeout := 50 * time.Millisecond // for no replica: it fails at once
			if withReplica {
				timeout = 2 * time.Second // a loaded machine's replica may take a while to answer WAIT's GETACK
			}
			pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c",
				ReplicaAcks: 1, ReplicaAckTimeout: timeout}, nil)
			if err != nil {
				t.Fatal(err)
			}
			answer, alone := message.NewMessage(watermill.NewUUID(), []byte("answer")), message.NewMessage(watermill.NewUUID(), []byte("answer alone"))
			redisstream.Answer(answer, q)
			redisstream.Answer(alone, q)
			errs := []error{
				pub.Publish("results", answer, message.NewMessage(watermill.NewUUID(), []byte("plain, with an answer"))),
				pub.Publish("results", message.NewMessage(watermill.NewUUID(), []byte("plain"))),
				pub.Publish("results", alone), // the worker's Publish: answers only
			}
			if withReplica {
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("Publish with a replica online: %v", err)
				}
				if n := replica.XLen(t.Context(), "results").Val(); n != 4 {
					t.Errorf("the replica holds %d of the 4 messages when Publish returned", n)
				}
				return
			}
			var each redisstream.PublishErrors
			if !errors.As(errs[0], &each) || len(each) != 2 || !errors.Is(each[0], redisstream.ErrReplicaAcks) || !errors.Is(each[1], redisstream.ErrReplicaAcks) {
				t.Errorf("Publish of an answer and a plain message without a replica: %v, want each with ErrReplicaAcks", errs[0])
			}
			if !errors.Is(errs[1], redisstream.ErrReplicaAcks) {
				t.Errorf("Publish of a plain message without a replica: %v, want ErrReplicaAcks", errs[1])
			}
			if !errors.Is(errs[2], redisstream.ErrReplicaAcks) {
				t.Errorf("Publish of an answer alone without a replica: %v, want ErrReplicaAcks", errs[2])
			}
			if n := rdb.XLen(t.Context(), "results").Val(); n != 4 {
				t.Errorf("the master holds %d of the 4 messages, want all: WAIT rolls nothing back", n)
			}
		})
	}
}

// startReplica starts a replica of master and waits until it acknowledges writes.
func startReplica(t *testing.T, master *redistest.Server) *redistest.Server {
	t.Helper()
	replica, rdb := redistest.Start(t), master.Client()
	host, port, _ := net.SplitHostPort(master.Addr)
	rdb.ConfigSet(t.Context(), "repl-diskless-sync-delay", "0")
	if err := replica.Client().Do(t.Context(), "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replica acknowledges a write", func() bool {
		var wait *redis.Cmd
		_, _ = rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			p.Set(t.Context(), "probe", 1, 0)
			wait = p.Do(t.Context(), "wait", 1, 100)
			return nil
		})
		return wait.Val() == int64(1)
	})
	return replica
}

// An answer call sent again after its reply was lost (go-redis resends the pipeline, WAIT with it, on a new
// connection) writes no answer twice, and its WAIT still waits for the answers the first send wrote: with the
// replica stopped, the Publish fails with ErrReplicaAcks. (The redis-server 7.0 the tests run makes a
// connection's WAIT wait for the server's offset at its last command, so the error held there before the
// call made again wrote anything; a Redis whose WAIT counts only the connection's own writes needs that
// write, which the note's expiry shows.)
func TestAResentAnswerCallWaitsForTheReplicasToo(t *testing.T) {
	master := redistest.Start(t)
	rdb := master.Client()
	replica := startReplica(t, master)
	publish(t, rdb, "orders", 1)
	q := receive(t, subscribe(t, newSubscriber(t, redisstream.SubscriberConfig{Client: rdb, ConsumerGroup: "g", Consumer: "c"}), "orders"))
	dropper := redistest.NewReplyDropper(t, master.Addr)
	opts := *rdb.Options()
	opts.Addr = dropper.Addr
	client := redis.NewClient(&opts)
	defer client.Close()
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client, ConsumerGroup: "g", Consumer: "c",
		ReplicaAcks: 1, ReplicaAckTimeout: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	answer := message.NewMessage(watermill.NewUUID(), []byte("answer"))
	redisstream.Answer(answer, q)
	replica.Pause()
	defer replica.Resume()
	if err := rdb.ScriptLoad(t.Context(), answerLua(t)).Err(); err != nil { // the first send runs the script
		t.Fatal(err)
	}
	note := redisstream.CommittedKey("orders", "g", "c")
	// Between the first send and the one made again, the note's expiry is shortened: the call made again
	// writes (sets it again) only with the fix, which is what a WAIT after it needs on a Redis counting a
	// connection's own writes.
	dropper.DropReplyThen("results", 1, func() { rdb.PExpire(context.Background(), note, 5*time.Second) })
	err = pub.Publish("results", answer)
	if dropper.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want the answer call's", dropper.Dropped())
	}
	if !errors.Is(err, redisstream.ErrReplicaAcks) {
		t.Errorf("Publish of an answer resent while the replica is stopped: %v, want ErrReplicaAcks", err)
	}
	if n := rdb.XLen(t.Context(), "results").Val(); n != 1 {
		t.Errorf("%d answers on the master, want 1: the call made again writes none", n)
	}
	if ttl := rdb.PTTL(t.Context(), note).Val(); ttl < 30*time.Second {
		t.Errorf("the note expires in %v after the call made again, want about a minute: it wrote nothing, so its WAIT had nothing of its own to wait for", ttl)
	}
}

// ReplicaAcks needs a client whose reads wait longer than the WAIT: a Client, ClusterClient or Ring with
// go-redis's default ReadTimeout (5 s) is refused with a ReplicaAckTimeout of 5 s, and one without a read
// timeout is not. (A Ring keeps its options as given, 0 for the default its shards turn into 5 s.)
func TestReplicaAcksNeedAReadTimeoutLongerThanTheirs(t *testing.T) {
	clients := map[string]func(readTimeout time.Duration) redis.UniversalClient{
		"client": func(rt time.Duration) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: rt})
		},
		"cluster": func(rt time.Duration) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: rt})
		},
		"ring": func(rt time.Duration) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ReadTimeout: rt})
		},
	}
	for name, client := range clients {
		for _, tc := range []struct {
			readTimeout time.Duration
			refused     bool
		}{{0, true}, {5 * time.Second, true}, {6 * time.Second, false}, {-1, false}} {
			rdb := client(tc.readTimeout)
			_, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, ReplicaAcks: 1,
				ReplicaAckTimeout: 5 * time.Second}, nil)
			_ = rdb.Close()
			if refused := err != nil && strings.Contains(err.Error(), "ReadTimeout"); refused != tc.refused {
				t.Errorf("%s with ReadTimeout %v: %v; refused want %v", name, tc.readTimeout, err, tc.refused)
			}
		}
	}
}
