package router

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
)

// TestWireMarshalerIsWatermills: the pipeline's marshaler puts on the wire what
// watermill-kafka's partitioning marshaler (keyed by the partition key metadata) puts
// there, and reads back what its unmarshaler reads.
func TestWireMarshalerIsWatermills(t *testing.T) {
	theirs := kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
		return msg.Metadata.Get(messages.MetaPartitionKey), nil
	})
	names := []string{messages.MetaEventID, messages.MetaPartitionKey, messages.MetaCorrelationID, messages.MetaOutboxRow, "poison_attempts", "x", ""}
	r := rand.New(rand.NewPCG(5, 6))
	sorted := func(hs []sarama.RecordHeader) []sarama.RecordHeader {
		out := slices.Clone(hs)
		slices.SortFunc(out, func(a, b sarama.RecordHeader) int { return bytes.Compare(a.Key, b.Key) })
		return out
	}
	for i := range 2000 {
		msg := message.NewMessage(strings.Repeat("u", r.IntN(3))+"id", []byte(`{"n":`+string(rune('0'+i%10))+`}`))
		for range r.IntN(5) {
			msg.Metadata.Set(names[r.IntN(len(names))], strings.Repeat("v", r.IntN(4)))
		}
		want, err := theirs.Marshal("topic", msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshaler.Marshal("topic", msg)
		if err != nil {
			t.Fatal(err)
		}
		wantKey, _ := want.Key.Encode()
		gotKey, _ := got.Key.Encode()
		if got.Topic != want.Topic || !bytes.Equal(gotKey, wantKey) || (gotKey == nil) != (wantKey == nil) ||
			!reflect.DeepEqual(got.Value, want.Value) || !reflect.DeepEqual(sorted(got.Headers), sorted(want.Headers)) {
			t.Fatalf("%v: marshalled %+v, watermill-kafka %+v", msg.Metadata, got, want)
		}
		consumed := &sarama.ConsumerMessage{Topic: "topic", Key: gotKey, Value: msg.Payload}
		for _, h := range got.Headers {
			consumed.Headers = append(consumed.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		back, err := marshaler.Unmarshal(consumed)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := theirs.Unmarshal(consumed)
		if err != nil {
			t.Fatal(err)
		}
		if back.UUID != ref.UUID || !bytes.Equal(back.Payload, ref.Payload) || !reflect.DeepEqual(back.Metadata, ref.Metadata) ||
			back.UUID != msg.UUID || !reflect.DeepEqual(back.Metadata, msg.Metadata) {
			t.Fatalf("unmarshalled %s %v, watermill-kafka %s %v, sent %s %v", back.UUID, back.Metadata, ref.UUID, ref.Metadata, msg.UUID, msg.Metadata)
		}
	}
	reserved := message.NewMessage("id", nil)
	reserved.Metadata.Set(kafka.UUIDHeaderKey, "x")
	if _, err := marshaler.Marshal("topic", reserved); err == nil {
		t.Fatal("metadata named like the UUID header was marshalled")
	}
}
