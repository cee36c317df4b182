package dev.keyordered.interop.spring;

import java.util.List;

import org.apache.pulsar.common.schema.SchemaType;
import org.springframework.pulsar.annotation.PulsarMessage;

/** An order, sent with Pulsar's JSON schema. */
@PulsarMessage(schemaType = SchemaType.JSON)
public record Order(String orderId, String customer, int quantity, double amount, List<String> items) {
}
