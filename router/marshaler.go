package router

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
)

// wireMarshaler writes and reads Watermill's Kafka messages exactly as watermill-kafka's
// partitioning marshaler (kafka.NewWithPartitioningMarshaler, keyed by the partition key
// metadata) does: the message UUID in header kafka.UUIDHeaderKey, each metadata entry a
// header, the payload as the value, the metadata's partition key as the record key. It
// copies less on the way (each score passes it twice): the names of the pipeline's own
// metadata are shared bytes and strings (sarama only reads a header), the headers are
// sized at once, and the record key is the partition key header's bytes.
type wireMarshaler struct{}

var _ kafka.MarshalerUnmarshaler = wireMarshaler{}

// knownKeys are the metadata names the pipeline sets, as header bytes.
var knownKeys = func() map[string][]byte {
	out := map[string][]byte{}
	for _, k := range []string{kafka.UUIDHeaderKey, messages.MetaEventID, messages.MetaPartitionKey, messages.MetaCorrelationID, messages.MetaOutboxRow} {
		out[k] = []byte(k)
	}
	return out
}()

func headerKey(k string) []byte {
	if b, ok := knownKeys[k]; ok {
		return b
	}
	return []byte(k)
}

// metadataName is a header's name as a string, the pipeline's own without a copy.
func metadataName(b []byte) string {
	switch string(b) {
	case messages.MetaEventID:
		return messages.MetaEventID
	case messages.MetaPartitionKey:
		return messages.MetaPartitionKey
	case messages.MetaCorrelationID:
		return messages.MetaCorrelationID
	case messages.MetaOutboxRow:
		return messages.MetaOutboxRow
	}
	return string(b)
}

func (wireMarshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	if msg.Metadata.Get(kafka.UUIDHeaderKey) != "" {
		return nil, fmt.Errorf("metadata %s is reserved by watermill for message UUID", kafka.UUIDHeaderKey)
	}
	headers := make([]sarama.RecordHeader, 1, 1+len(msg.Metadata))
	headers[0] = sarama.RecordHeader{Key: knownKeys[kafka.UUIDHeaderKey], Value: []byte(msg.UUID)}
	var key []byte
	for k, v := range msg.Metadata {
		h := sarama.RecordHeader{Key: headerKey(k), Value: []byte(v)}
		if k == messages.MetaPartitionKey {
			key = h.Value
		}
		headers = append(headers, h)
	}
	if key == nil { // as partitionKey's empty string: an empty key, not none
		key = []byte{}
	}
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(msg.Payload), Headers: headers}, nil
}

func (wireMarshaler) Unmarshal(m *sarama.ConsumerMessage) (*message.Message, error) {
	var id string
	md := make(message.Metadata, len(m.Headers))
	for _, h := range m.Headers {
		if string(h.Key) == kafka.UUIDHeaderKey {
			id = string(h.Value)
			continue
		}
		md.Set(metadataName(h.Key), string(h.Value))
	}
	msg := message.NewMessage(id, m.Value)
	msg.Metadata = md
	return msg, nil
}
